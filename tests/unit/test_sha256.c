/* test_sha256.c: src/sha256.c against the FIPS 180-4 examples. */
#include <string.h>

#include "relattn.h"
#include "unit.h"

static void hash(const char *s, size_t n, size_t chunk, char out[65]) {
  relattn_sha256 h;
  size_t i;
  relattn_sha256_init(&h);
  for (i = 0; i < n; i += chunk)
    relattn_sha256_update(&h, s + i, n - i < chunk ? n - i : chunk);
  relattn_sha256_hex(&h, out);
}

int main(void) {
  char out[65];
  static char million[1000000];
  const char *two =
      "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  size_t chunks[] = {1, 3, 63, 64, 65, 1000, 1000000};
  size_t i;
  int pass;
  unit_seed();
  printf("accelerated: %d\n", relattn_sha256_accelerated());
  for (pass = 0; pass < 2; pass++) {
  relattn_sha256_set_portable(pass);
  hash("", 0, 1, out);
  CHECK(!strcmp(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "empty %s", out);
  hash("abc", 3, 3, out);
  CHECK(!strcmp(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "abc %s", out);
  for (i = 0; i < 4; i++) {
    hash(two, strlen(two), chunks[i], out);
    CHECK(!strcmp(out, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"), "448 bits, chunk %zu: %s", chunks[i], out);
  }
  memset(million, 'a', sizeof million);
  for (i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
    hash(million, sizeof million, chunks[i], out);
    CHECK(!strcmp(out, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "million a, chunk %zu: %s", chunks[i], out);
  }
  }
  /* both block functions agree on random data of every length to 300 and a
  ** few large ones, split at random points */
  {
    static unsigned char data[70000];
    char a[65], b[65];
    size_t n, j;
    int bad = 0;
    for (j = 0; j < sizeof data; j++) data[j] = (unsigned char)unit_next();
    for (n = 0; n < 300 + 5; n++) {
      size_t len = n < 300 ? n : sizeof data - unit_next() % 1000;
      size_t chunk = 1 + unit_next() % 200;
      relattn_sha256_set_portable(1);
      hash((const char *)data, len, chunk, a);
      relattn_sha256_set_portable(0);
      hash((const char *)data, len, 1 + unit_next() % 5000, b);
      bad += strcmp(a, b) != 0;
    }
    CHECK(bad == 0, "%d lengths where the two block functions differ", bad);
  }
  UNIT_DONE();
}
