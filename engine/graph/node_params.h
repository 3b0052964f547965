/* Typed node parameters, generated from one list per node.
 *
 * A node file lists its params once, as an X-macro:
 *
 *   #define AFFINE_PARAMS(P)                              \
 *     P(FLOAT, scale, "1", "multiplier", NULL)            \
 *     P(FLOAT, offset, "0", "offset", NULL)
 *   SL_NODE_PARAMS(affine_params, AFFINE_PARAMS)
 *
 * and gets, from that one list:
 *   - `affine_params`, a struct with one typed field per param
 *     (INT int64_t, FLOAT double, BOOL bool, STRING/PATH const char *,
 *     ENUM int: the index of the value in the choices, SHAPE/LIST
 *     const sl_param_value *);
 *   - `affine_params_defs[]`, the descriptor's param table;
 *   - `affine_params_bind`, which the graph layer calls once per node after
 *     it converted the YAML values (node->typed_params points at the result);
 *   - `affine_params_of(node)`, the typed view for infer, prepare and kernels.
 * The descriptor takes all of it with `SL_PARAMS_DESC(affine_params)`.
 *
 * ENUM params are strings restricted to the '|'-separated choices given as
 * the last argument ("median|zero|none"); a value outside them is refused when
 * the graph is built, at the value's line. Nodes name the indices with their
 * own enum in the same order. Nothing is looked up by name at run time. */
#ifndef SL_NODE_PARAMS_H
#define SL_NODE_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/pipeline/spec.h"

/* A resolved, typed parameter value. */
typedef struct sl_param_value {
  sl_ptype type;
  int64_t i;     /* INT; ENUM: index in the choices */
  double f;      /* FLOAT */
  bool b;        /* BOOL */
  char *s;       /* STRING, ENUM, PATH (PATH resolved relative to the pipeline file) */
  size_t n;      /* SHAPE, LIST */
  int64_t *ints; /* SHAPE */
  char **strs;   /* LIST items as text */
} sl_param_value;

typedef struct sl_param_def {
  const char *name;
  sl_ptype type;
  const char *default_value; /* as YAML text; NULL = required */
  const char *doc;
  const char *choices; /* STRING only: "a|b|c" makes it an enum; NULL otherwise */
} sl_param_def;

/* Element count of a static array, for descriptor tables. */
#define SL_COUNT_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- generated code ------------------------------------------------------ */

#define SL_PARAM_CTYPE_INT int64_t
#define SL_PARAM_CTYPE_FLOAT double
#define SL_PARAM_CTYPE_BOOL bool
#define SL_PARAM_CTYPE_STRING const char *
#define SL_PARAM_CTYPE_PATH const char *
#define SL_PARAM_CTYPE_ENUM int
#define SL_PARAM_CTYPE_SHAPE const sl_param_value *
#define SL_PARAM_CTYPE_LIST const sl_param_value *

#define SL_PARAM_PTYPE_INT SL_PT_INT
#define SL_PARAM_PTYPE_FLOAT SL_PT_FLOAT
#define SL_PARAM_PTYPE_BOOL SL_PT_BOOL
#define SL_PARAM_PTYPE_STRING SL_PT_STRING
#define SL_PARAM_PTYPE_PATH SL_PT_PATH
#define SL_PARAM_PTYPE_ENUM SL_PT_STRING
#define SL_PARAM_PTYPE_SHAPE SL_PT_SHAPE
#define SL_PARAM_PTYPE_LIST SL_PT_LIST

static inline void sl_param_bind_INT(const sl_param_value *v, int64_t *f) { *f = v->i; }
static inline void sl_param_bind_FLOAT(const sl_param_value *v, double *f) { *f = v->f; }
static inline void sl_param_bind_BOOL(const sl_param_value *v, bool *f) { *f = v->b; }
static inline void sl_param_bind_STRING(const sl_param_value *v, const char **f) { *f = v->s; }
static inline void sl_param_bind_PATH(const sl_param_value *v, const char **f) { *f = v->s; }
static inline void sl_param_bind_ENUM(const sl_param_value *v, int *f) { *f = (int)v->i; }
static inline void sl_param_bind_SHAPE(const sl_param_value *v, const sl_param_value **f) { *f = v; }
static inline void sl_param_bind_LIST(const sl_param_value *v, const sl_param_value **f) { *f = v; }

#define SL_PARAM_FIELD_(kind, name, dflt, doc, choices) SL_PARAM_CTYPE_##kind name;
#define SL_PARAM_DEF_(kind, name, dflt, doc, choices) {#name, SL_PARAM_PTYPE_##kind, dflt, doc, choices},
#define SL_PARAM_BIND_(kind, name, dflt, doc, choices) sl_param_bind_##kind(&v[i++], &p->name);

#define SL_NODE_PARAMS(T, LIST)                                                        \
  typedef struct T {                                                                   \
    LIST(SL_PARAM_FIELD_)                                                              \
  } T;                                                                                 \
  static const sl_param_def T##_defs[] = {LIST(SL_PARAM_DEF_)};                        \
  static void T##_bind(const sl_param_value *v, void *out) {                           \
    T *p = (T *)out;                                                                   \
    int i = 0;                                                                         \
    LIST(SL_PARAM_BIND_)                                                               \
    (void)i;                                                                           \
  }                                                                                    \
  static inline const T *T##_of(const struct sl_node *n) {                             \
    return (const T *)sl_node_typed_params(n);                                         \
  }

/* Designated initialisers of a descriptor for the params of SL_NODE_PARAMS(T). */
#define SL_PARAMS_DESC(T)                                                              \
  .params = T##_defs, .n_params = SL_COUNT_OF(T##_defs), .params_size = sizeof(T),     \
  .params_bind = T##_bind

struct sl_node;
/* The struct the descriptor's params_bind filled for this node. */
const void *sl_node_typed_params(const struct sl_node *n);

#endif
