/* A Node.js native addon (Node-API, so one build loads in any Node.js of version 8 of the API or
 * later): pack(buffer) run-length encodes a Buffer through malloc'd scratch space, and unpack()
 * decodes it into another malloc'd buffer, each freed before returning; what JS gets back is a
 * copy. Its C-level allocations are what a preloaded allocator serves. */
#include <node_api.h>
#include <stdlib.h>
#include <string.h>

static napi_value throw_oom(napi_env env) {
    napi_throw_error(env, NULL, "out of memory");
    return NULL;
}

static napi_value pack(napi_env env, napi_callback_info info) {
    size_t argc = 1;
    napi_value argv[1], out;
    unsigned char *in;
    size_t n;
    if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
        napi_get_buffer_info(env, argv[0], (void **)&in, &n) != napi_ok) {
        napi_throw_type_error(env, NULL, "pack(buffer)");
        return NULL;
    }
    unsigned char *scratch = malloc(2 * n + 1);
    if (!scratch) return throw_oom(env);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t run = 1;
        while (i + run < n && run < 255 && in[i + run] == in[i]) run++;
        scratch[k++] = (unsigned char)run;
        scratch[k++] = in[i];
        i += run;
    }
    void *dst;
    napi_status st = napi_create_buffer_copy(env, k, scratch, &dst, &out);
    free(scratch);
    return st == napi_ok ? out : throw_oom(env);
}

static napi_value unpack(napi_env env, napi_callback_info info) {
    size_t argc = 1;
    napi_value argv[1], out;
    unsigned char *in;
    size_t n, total = 0;
    if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
        napi_get_buffer_info(env, argv[0], (void **)&in, &n) != napi_ok || n % 2) {
        napi_throw_type_error(env, NULL, "unpack(packed buffer)");
        return NULL;
    }
    for (size_t i = 0; i < n; i += 2) total += in[i];
    unsigned char *scratch = malloc(total ? total : 1);
    if (!scratch) return throw_oom(env);
    size_t k = 0;
    for (size_t i = 0; i < n; i += 2) {
        memset(scratch + k, in[i + 1], in[i]);
        k += in[i];
    }
    void *dst;
    napi_status st = napi_create_buffer_copy(env, total, scratch, &dst, &out);
    free(scratch);
    return st == napi_ok ? out : throw_oom(env);
}

NAPI_MODULE_INIT() {
    napi_value f;
    napi_create_function(env, "pack", NAPI_AUTO_LENGTH, pack, NULL, &f);
    napi_set_named_property(env, exports, "pack", f);
    napi_create_function(env, "unpack", NAPI_AUTO_LENGTH, unpack, NULL, &f);
    napi_set_named_property(env, exports, "unpack", f);
    return exports;
}
