/*
** store.c: the model tables and the per-connection weight cache.
*/
#include "ext.h"
#include "functions.h"

SQLITE_EXTENSION_INIT3

void relattn_store_close(relattn_conn *conn) { (void)conn; }
