/*
** relattn.c: the extension's entry point and registration table.
**
**   .load ./relattn
**   SELECT relattn_version();          -- '0.1.0'
**   SELECT relattn_debug();            -- build, BLAS, SIMD path, threads
**   SELECT relattn_threads(2);         -- this connection's worker threads
**   SELECT relattn_max_memory();       -- bytes one call may allocate
**   SELECT relattn_cache_size();       -- bytes of models a connection keeps
**
** Every SQL function is one row of the table below, registered in a loop; a
** failure names the function. All rows share one relattn_conn (ext.h).
*/
#include <stdio.h>
#include <string.h>

#include "ext.h"
#include "functions.h"

SQLITE_EXTENSION_INIT1

static void connRelease(void *p) {
  relattn_conn *conn = p;
  if (--conn->refs > 0) return;
  relattn_store_close(conn);
  relattn_scan_spare_free(conn);
  relattn_pool_free(conn->pool);
  sqlite3_close_v2(conn->side);
  sqlite3_close_v2(conn->json);
  sqlite3_free(conn);
}

/* ---- relattn_version(), relattn_debug(), settings ------------------------ */

static void versionFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  sqlite3_result_text(ctx, RELATTN_VERSION, -1, SQLITE_STATIC);
}

static void debugFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  relattn_conn *conn = sqlite3_user_data(ctx);
  char *s;
  int n_models;
  sqlite3_int64 cache_bytes;
  (void)argc;
  (void)argv;
  relattn_store_stats(conn, &n_models, &cache_bytes);
  s = sqlite3_mprintf(
      "relattn %s\n"
      "build: %s %s%s\n"
      "sqlite: %s\n"
      "blas: %s\n"
      "simd: %s\n"
      "threads: %d (cores %d)\n"
      "max_tokens: %d\n"
      "max_memory: %lld\n"
      "cache_size: %lld\n"
      "cached_models: %d\n"
      "cached_bytes: %lld",
      RELATTN_VERSION, __DATE__,
#if defined(__OPTIMIZE__)
      "optimized",
#else
      "debug",
#endif
#if defined(__SANITIZE_ADDRESS__)
      " asan",
#else
      "",
#endif
      sqlite3_libversion(), relattn_blas_config(), relattn_simd_path(),
      conn->n_threads, relattn_cpu_count(), conn->max_tokens,
      conn->max_memory, conn->cache_size, n_models, cache_bytes);
  if (!s) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  sqlite3_result_text(ctx, s, -1, sqlite3_free);
}

/* Reads an optional integer setting argument in [lo, hi]. Returns 0 and sets
** an error when it is not one. */
static int settingArg(sqlite3_context *ctx, const char *fn, sqlite3_value *v,
                      sqlite3_int64 lo, sqlite3_int64 hi, int *out) {
  sqlite3_int64 n;
  if (sqlite3_value_type(v) != SQLITE_INTEGER) {
    relattn_result_errorf(ctx, "%s: n must be an integer", fn);
    return 0;
  }
  n = sqlite3_value_int64(v);
  if (n < lo || n > hi) {
    relattn_result_errorf(ctx, "%s: n must be between %lld and %lld, not %lld",
                          fn, lo, hi, n);
    return 0;
  }
  *out = (int)n;
  return 1;
}

static void threadsFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  relattn_conn *conn = sqlite3_user_data(ctx);
  if (argc == 1 &&
      !settingArg(ctx, "relattn_threads", argv[0], 1, 256, &conn->n_threads))
    return;
  sqlite3_result_int(ctx, conn->n_threads);
}

static void maxTokensFunc(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv) {
  relattn_conn *conn = sqlite3_user_data(ctx);
  if (argc == 1 && !settingArg(ctx, "relattn_max_tokens", argv[0], 1,
                               1 << 24, &conn->max_tokens))
    return;
  sqlite3_result_int(ctx, conn->max_tokens);
}

static void maxMemoryFunc(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv) {
  relattn_conn *conn = sqlite3_user_data(ctx);
  if (argc == 1) {
    sqlite3_int64 n;
    if (sqlite3_value_type(argv[0]) != SQLITE_INTEGER) {
      relattn_result_errorf(ctx, "relattn_max_memory: bytes must be an integer");
      return;
    }
    n = sqlite3_value_int64(argv[0]);
    if (n < (1 << 20)) {
      relattn_result_errorf(
          ctx, "relattn_max_memory: bytes must be at least 1048576, not %lld",
          n);
      return;
    }
    conn->max_memory = n;
  }
  sqlite3_result_int64(ctx, conn->max_memory);
}

/* relattn_cache_size([bytes]): how many bytes of float32 weights the
** connection keeps of models it is not using; setting it drops at once what
** no longer fits. 0 keeps only the model used last. */
static void cacheSizeFunc(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv) {
  relattn_conn *conn = sqlite3_user_data(ctx);
  if (argc == 1) {
    sqlite3_int64 n;
    if (sqlite3_value_type(argv[0]) != SQLITE_INTEGER) {
      relattn_result_errorf(ctx, "relattn_cache_size: bytes must be an integer");
      return;
    }
    n = sqlite3_value_int64(argv[0]);
    if (n < 0) {
      relattn_result_errorf(
          ctx, "relattn_cache_size: bytes must be at least 0, not %lld", n);
      return;
    }
    conn->cache_size = n;
    relattn_store_trim(conn);
  }
  sqlite3_result_int64(ctx, conn->cache_size);
}

static void progressFunc(sqlite3_context *ctx, int argc,
                         sqlite3_value **argv) {
  relattn_conn *conn = sqlite3_user_data(ctx);
  if (argc == 1 &&
      !settingArg(ctx, "relattn_progress", argv[0], 0, 1, &conn->progress))
    return;
  sqlite3_result_int(ctx, conn->progress);
}

/* relattn_progress_job(label, rows_done, rows_total, tokens_done,
** tokens_total): a batch job made of many statements (sql/score_corpus.sql,
** a chunk a statement) names itself and says what its earlier statements
** did; each relattn_scan then prints the job's progress, its own work added,
** once a second, and no line of its own at its end. NULL ends the job. */
static void progressJobFunc(sqlite3_context *ctx, int argc,
                            sqlite3_value **argv) {
  static const char *const names[] = {"rows_done", "rows_total",
                                      "tokens_done", "tokens_total"};
  relattn_conn *conn = sqlite3_user_data(ctx);
  sqlite3_int64 n[4];
  const char *label;
  int i, len;
  if (argc == 1 && sqlite3_value_type(argv[0]) == SQLITE_NULL) {
    conn->job_label[0] = 0;
  } else if (argc == 1) {
    relattn_result_errorf(ctx, "relattn_progress_job: give label, rows_done, "
                          "rows_total, tokens_done and tokens_total, or NULL "
                          "to end the job");
    return;
  } else if (argc == 5) {
    if (sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
      relattn_result_errorf(ctx, "relattn_progress_job: label must be text");
      return;
    }
    label = (const char *)sqlite3_value_text(argv[0]);
    len = sqlite3_value_bytes(argv[0]);
    if (!label) {
      sqlite3_result_error_nomem(ctx);
      return;
    }
    if (len < 1 || len >= (int)sizeof conn->job_label ||
        (int)strlen(label) != len) {
      relattn_result_errorf(ctx, "relattn_progress_job: label must be 1 to "
                            "%d bytes, without NUL",
                            (int)sizeof conn->job_label - 1);
      return;
    }
    for (i = 0; i < 4; i++) {
      if (sqlite3_value_type(argv[i + 1]) != SQLITE_INTEGER ||
          (n[i] = sqlite3_value_int64(argv[i + 1])) < 0) {
        relattn_result_errorf(ctx, "relattn_progress_job: %s must be an "
                              "integer at least 0", names[i]);
        return;
      }
    }
    memcpy(conn->job_label, label, (size_t)len + 1);
    conn->job_rows = n[0];
    conn->job_all_rows = n[1];
    conn->job_tokens = n[2];
    conn->job_all_tokens = n[3];
  }
  if (conn->job_label[0])
    sqlite3_result_text(ctx, conn->job_label, -1, SQLITE_TRANSIENT);
  else
    sqlite3_result_null(ctx);
}

/* ---- registration -------------------------------------------------------- */

#define PURE (SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS)
#define READS (SQLITE_UTF8)                     /* reads model tables */
#define WRITES (SQLITE_UTF8 | SQLITE_DIRECTONLY) /* writes tables or settings */

static const struct {
  const char *name;
  int n_arg;
  int flags;
  void (*x_func)(sqlite3_context *, int, sqlite3_value **);
  void (*x_step)(sqlite3_context *, int, sqlite3_value **);
  void (*x_final)(sqlite3_context *);
} functions[] = {
    {"relattn_version", 0, PURE, versionFunc, 0, 0},
    {"relattn_debug", 0, SQLITE_UTF8, debugFunc, 0, 0},
    {"relattn_threads", 0, SQLITE_UTF8, threadsFunc, 0, 0},
    {"relattn_threads", 1, WRITES, threadsFunc, 0, 0},
    {"relattn_max_tokens", 0, SQLITE_UTF8, maxTokensFunc, 0, 0},
    {"relattn_max_tokens", 1, WRITES, maxTokensFunc, 0, 0},
    {"relattn_max_memory", 0, SQLITE_UTF8, maxMemoryFunc, 0, 0},
    {"relattn_max_memory", 1, WRITES, maxMemoryFunc, 0, 0},
    {"relattn_cache_size", 0, SQLITE_UTF8, cacheSizeFunc, 0, 0},
    {"relattn_cache_size", 1, WRITES, cacheSizeFunc, 0, 0},
    {"relattn_progress", 0, SQLITE_UTF8, progressFunc, 0, 0},
    {"relattn_progress", 1, WRITES, progressFunc, 0, 0},
    {"relattn_progress_job", 0, SQLITE_UTF8, progressJobFunc, 0, 0},
    {"relattn_progress_job", 1, WRITES, progressJobFunc, 0, 0},
    {"relattn_progress_job", 5, WRITES, progressJobFunc, 0, 0},

    /* ext/attention_fn.c */
    {"relattn_attention", 6, PURE, relattn_attention_func, 0, 0},
    {"relattn_attention", 7, PURE, relattn_attention_func, 0, 0},
    {"relattn_attention", 8, PURE, relattn_attention_func, 0, 0},

    /* ext/import.c, ext/export.c, ext/quantize.c, ext/store.c */
    {"relattn_import", 2, WRITES, relattn_import_func, 0, 0},
    {"relattn_import", 3, WRITES, relattn_import_func, 0, 0},
    {"relattn_import", 4, WRITES, relattn_import_func, 0, 0},
    {"relattn_import", 5, WRITES, relattn_import_func, 0, 0},
    /* a safetensors index, then its shards */
    {"relattn_import", -1, WRITES, relattn_import_func, 0, 0},
    {"relattn_export", 1, READS, relattn_export_func, 0, 0},
    {"relattn_quantize", 3, WRITES, relattn_quantize_func, 0, 0},
    {"relattn_weights", 2, READS, relattn_weights_func, 0, 0},

    /* ext/tokens.c */
    {"relattn_tokenize", 2, READS, relattn_tokenize_func, 0, 0},
    {"relattn_detokenize", 2, READS, relattn_detokenize_func, 0, 0},
    {"relattn_tokens", 1, PURE, relattn_tokens_func, 0, 0},
    {"relattn_tokens_json", 1, PURE, relattn_tokens_json_func, 0, 0},
    {"relattn_tokens_agg", 1, SQLITE_UTF8 | SQLITE_INNOCUOUS, 0,
     relattn_tokens_agg_step, relattn_tokens_agg_final},

    /* ext/model_fn.c */
    {"relattn_score", 2, READS, relattn_score_func, 0, 0},
    {"relattn_generate", 2, READS, relattn_generate_func, 0, 0},
    {"relattn_generate", 3, READS, relattn_generate_func, 0, 0},
    {"relattn_perplexity", 2, READS, relattn_perplexity_func, 0, 0},
    {"relattn_score", 3, READS, relattn_score_func, 0, 0},
    {"relattn_perplexity", 3, READS, relattn_perplexity_func, 0, 0},
    {"relattn_embed", 2, READS, relattn_embed_func, 0, 0},
    {"relattn_embed", 3, READS, relattn_embed_func, 0, 0},
    {"relattn_classify", 2, READS, relattn_classify_func, 0, 0},
    {"relattn_classify", 3, READS, relattn_classify_func, 0, 0},

    /* ext/svg_fn.c */
    {"relattn_svg_attention", 4, READS, relattn_svg_attention_func, 0, 0},
    {"relattn_svg_surprise", 2, READS, relattn_svg_surprise_func, 0, 0},
    {"relattn_svg_profile", 2, SQLITE_UTF8 | SQLITE_INNOCUOUS, 0,
     relattn_svg_profile_step, relattn_svg_profile_final},
    {"relattn_svg_profile", 3, SQLITE_UTF8 | SQLITE_INNOCUOUS, 0,
     relattn_svg_profile_step, relattn_svg_profile_final},
    {"relattn_svg_profile", 4, SQLITE_UTF8 | SQLITE_INNOCUOUS, 0,
     relattn_svg_profile_step, relattn_svg_profile_final},

};

static const struct {
  const char *name;
  sqlite3_module *module;
} modules[] = {
    /* ext/tokens.c, ext/model_tvf.c, ext/zero_shot.c, ext/entities_tvf.c,
    ** ext/scan.c */
    {"relattn_tokens_each", &relattn_tokens_each_module},
    {"relattn_logprobs", &relattn_logprobs_module},
    {"relattn_generate_tokens", &relattn_generate_tokens_module},
    {"relattn_labels", &relattn_labels_module},
    {"relattn_attention_weights", &relattn_attention_weights_module},
    {"relattn_zero_shot", &relattn_zero_shot_module},
    {"relattn_token_labels", &relattn_token_labels_module},
    {"relattn_scan", &relattn_scan_module},
    {0, 0},
};

#ifdef _WIN32
__declspec(dllexport)
#else
__attribute__((visibility("default")))
#endif
int sqlite3_relattn_init(sqlite3 *db, char **pzErrMsg,
                         const sqlite3_api_routines *pApi) {
  relattn_conn *conn;
  size_t i;
  int rc = SQLITE_OK;
  SQLITE_EXTENSION_INIT2(pApi);

  conn = sqlite3_malloc64(sizeof *conn);
  if (!conn) return SQLITE_NOMEM;
  memset(conn, 0, sizeof *conn);
  conn->db = db;
  conn->n_threads = relattn_cpu_count();
  conn->max_tokens = RELATTN_DEFAULT_MAX_TOKENS;
  conn->max_memory = RELATTN_DEFAULT_MAX_MEMORY;
  conn->cache_size = RELATTN_DEFAULT_CACHE_SIZE;

  for (i = 0; i < sizeof functions / sizeof functions[0]; i++) {
    conn->refs++;
    rc = sqlite3_create_function_v2(db, functions[i].name, functions[i].n_arg,
                                    functions[i].flags, conn,
                                    functions[i].x_func, functions[i].x_step,
                                    functions[i].x_final, connRelease);
    /* On failure SQLite has already called connRelease. */
    if (rc != SQLITE_OK) {
      if (pzErrMsg)
        *pzErrMsg = sqlite3_mprintf("relattn: cannot register %s: %s",
                                    functions[i].name, sqlite3_errmsg(db));
      return rc;
    }
  }
  for (i = 0; modules[i].name; i++) {
    conn->refs++;
    rc = sqlite3_create_module_v2(db, modules[i].name, modules[i].module, conn,
                                  connRelease);
    if (rc != SQLITE_OK) {
      if (pzErrMsg)
        *pzErrMsg = sqlite3_mprintf("relattn: cannot register %s: %s",
                                    modules[i].name, sqlite3_errmsg(db));
      return rc;
    }
  }
  return SQLITE_OK;
}
