/*
** functions.h: the SQL functions and modules each ext/ file defines, for the
** registration table in relattn.c.
*/
#ifndef RELATTN_FUNCTIONS_H
#define RELATTN_FUNCTIONS_H

#include "ext.h"


/* ext/store.c: frees the connection's model cache. */
void relattn_store_close(relattn_conn *conn);

#endif /* RELATTN_FUNCTIONS_H */
