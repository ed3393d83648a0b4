/*
 * A plugin that breaks the ABI in the way one -D flag says, so that the host tests can check
 * that each breach is caught. Without a flag it is a well-behaved plugin that allows everyone.
 *
 *   WRONG_MAJOR     declares ABI 2.0            DECLINE        the entry returns NULL
 *   SHORT_TABLE     struct_size is too small    NO_AUTHENTICATE  authenticate is NULL
 *   BAD_NAME        the name has a space        NO_ENTRY       mesgd_plugin_entry is missing
 *   GARBAGE_ANSWER  the answer is not JSON      HUGE_ANSWER    the answer is 1 MiB
 *   ODD_STATUS      authenticate returns 7      NEWER_MINOR    ABI 1.5 with a longer table
 *   FAIL_CREATE     create fails with a message
 */

/* Each variant leaves some of the well-behaved parts unused. */
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-const-variable"
#pragma GCC diagnostic ignored "-Wunused-parameter"

#include <stdlib.h>
#include <string.h>

#include "mesgd_plugin.h"

static int instance_token;

static const char *name(void) {
#ifdef BAD_NAME
    return "bad name";
#else
    return "bad-plugin";
#endif
}

static const char *version(void) {
    return "0.0.1";
}

static int32_t give(struct mesgd_buffer *out, const char *text, size_t len) {
    out->ptr = malloc(len);
    memcpy(out->ptr, text, len);
    out->len = len;
    return MESGD_PLUGIN_OK;
}

static int32_t create(const uint8_t *config, size_t len, void **out_instance, struct mesgd_buffer *out_error) {
    (void)config, (void)len;
#ifdef FAIL_CREATE
    give(out_error, "no database configured", 22);
    return MESGD_PLUGIN_ERROR;
#else
    (void)out_error;
    *out_instance = &instance_token;
    return MESGD_PLUGIN_OK;
#endif
}

static int32_t authenticate(void *instance, const uint8_t *request, size_t len, struct mesgd_buffer *out) {
    (void)instance, (void)request, (void)len;
#if defined(GARBAGE_ANSWER)
    return give(out, "{\"result\": allow", 16);
#elif defined(HUGE_ANSWER)
    size_t size = 1 << 20;
    char *big = malloc(size);
    memset(big, ' ', size);
    memcpy(big, "{\"result\":\"allow\"}", 18);
    out->ptr = (uint8_t *)big;
    out->len = size;
    return MESGD_PLUGIN_OK;
#elif defined(ODD_STATUS)
    give(out, "odd", 3);
    return 7;
#else
    return give(out, "{\"result\":\"allow\"}", 18);
#endif
}

static void free_buffer(uint8_t *ptr, size_t len) {
    (void)len;
    free(ptr);
}

static void destroy(void *instance) {
    (void)instance;
}

struct longer_table {
    struct mesgd_plugin_v1 v1;
    void (*added_in_1_5)(void);
};

static const struct longer_table TABLE = {
    .v1 = {
#if defined(WRONG_MAJOR)
        .abi_version = 2u << 16,
#elif defined(NEWER_MINOR)
        .abi_version = 1u << 16 | 5u,
#else
        .abi_version = MESGD_PLUGIN_ABI_VERSION,
#endif
#if defined(SHORT_TABLE)
        .struct_size = 16,
#elif defined(NEWER_MINOR)
        .struct_size = sizeof(struct longer_table),
#else
        .struct_size = sizeof(struct mesgd_plugin_v1),
#endif
        .name = name,
        .version = version,
        .create = create,
#ifndef NO_AUTHENTICATE
        .authenticate = authenticate,
#endif
        .free_buffer = free_buffer,
        .destroy = destroy,
    },
    .added_in_1_5 = NULL,
};

#ifdef NO_ENTRY
const struct mesgd_plugin_v1 *mesgd_plugin_entry_misspelt(uint32_t host_abi_version) {
#else
const struct mesgd_plugin_v1 *mesgd_plugin_entry(uint32_t host_abi_version) {
#endif
#ifdef DECLINE
    (void)host_abi_version;
    return NULL;
#else
    (void)host_abi_version;
    return &TABLE.v1;
#endif
}
