/*
** import_read.h: what relattn_import (ext/import.c) and its file readers
** (ext/import_read.c) share: the state the readers fill with a
** checkpoint's tensors, which ext/import.c then maps, checks and stores.
*/
#ifndef RELATTN_IMPORT_READ_H
#define RELATTN_IMPORT_READ_H

#include "ext.h"
#include "functions.h"

#include <stdint.h>

typedef struct relattn_import_state {
  relattn_st_tensor *t;
  int n, cap;
  char *config;          /* from the argument or the metadata */
  char *tok_config;      /* tokenizer_config_json, or NULL */
  /* a Hugging Face checkpoint (ext/hf.c), each NULL otherwise: */
  const char **raw;      /* (cap) the dtype of a tensor that is no float
                         ** ("I64": a position_ids buffer), kept as U8 bytes */
  unsigned char *skip;   /* (n) 1: not part of the model */
  uint8_t **own;         /* (n) the data, rewritten (transposed), or NULL */
  char **hf_name;        /* (n) the file's name of a renamed tensor */
  int n_hf;              /* entries of skip, own and hf_name: n when they
                         ** were made, before a Dense file's tensors come */
  uint8_t *tok_own;      /* the tokenizer file stored in place of
                         ** tokenizer_blob (a tokenizer.json's vocab.txt) */
  relattn_hf_info hf;
  const uint8_t **base;  /* (n) the data section of the tensor's file */
  int *shard;            /* (n) its shard, from 1; NULL: one file */
} relattn_import_state;

/* One safetensors file read into s: its header's tensors appended, checked
** against its data section. shard: its number from 1 among a sharded
** checkpoint's files, 0 for the only file; what starts the messages about
** its length, what_t those about its tensors. */
int relattn_import_read_file(sqlite3 *db, relattn_import_state *s,
                             const uint8_t *file, size_t size, int shard,
                             const char *what, const char *what_t,
                             int lenient, char **pzErr);

/* Whether a weights argument is a safetensors index (Hugging Face's
** model.safetensors.index.json) rather than a safetensors file: JSON text
** starting with '{'. A safetensors file starts with its header's length,
** 8 bytes of which the high ones are 0, which no JSON text holds. */
int relattn_import_is_index(sqlite3_value *v);

/* The shards against the index: each tensor of its weight_map in exactly
** one shard, and no shard's tensor outside it. A missing shard is named by
** the file the index gives for its tensors. */
int relattn_import_check_index(sqlite3 *db, const char *index,
                               const relattn_import_state *s, char **pzErr);

#endif /* RELATTN_IMPORT_READ_H */
