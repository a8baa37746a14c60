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
  unit_seed();
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
  UNIT_DONE();
}
