/*
** scan.h: what the two halves of relattn_scan share: the virtual table's
** arguments, as ext/scan_create.c parses and checks them at CREATE and
** ext/scan.c runs them at each query.
*/
#ifndef RELATTN_SCAN_H
#define RELATTN_SCAN_H

#include "ext.h"

typedef struct scan_vtab {
  sqlite3_vtab base; /* must be first */
  relattn_conn *conn;
  char *model;       /* model name */
  char *source;      /* source table or view */
  char *tokens;      /* its token column */
  char *text_b;      /* text_b=: its column of pairs' second texts, or NULL */
  char *id;          /* its INTEGER id column; NULL: rowid */
  char *schema;      /* where the virtual table lives ("main", "temp", ...) */
  char *name;        /* its own name */
  char *pooling_arg; /* pooling=, as given, or NULL */
  char *generate_arg; /* generate=: the generated column's options (JSON) */
  int pooling;       /* RELATTN_POOL_* of the embedding column */
  int busy;          /* running its own SQL: reading source or the model */
} scan_vtab;

/* xCreate, xConnect, xDisconnect (xDestroy too) of relattn_scan_module. */
int relattn_scan_create(sqlite3 *db, void *aux, int argc,
                        const char *const *argv, sqlite3_vtab **ppVtab,
                        char **pzErr);
int relattn_scan_connect(sqlite3 *db, void *aux, int argc,
                         const char *const *argv, sqlite3_vtab **ppVtab,
                         char **pzErr);
int relattn_scan_disconnect(sqlite3_vtab *p);

/* The database a name the scan uses is looked up in: the scan's own, or
** for a scan in temp, temp when the name is there, else main. */
const char *relattn_scan_schema_of(sqlite3 *db, const scan_vtab *vt,
                                   const char *name);
/* The model tables' database for relattn_store_acquire_in, or NULL when
** the bare names resolve there anyway. */
const char *relattn_scan_model_schema(sqlite3 *db, const scan_vtab *vt);

#endif /* RELATTN_SCAN_H */
