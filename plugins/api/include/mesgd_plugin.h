/*
 * mesgd_plugin.h — the C ABI of mesgd authentication plugins, major version 1.
 *
 * A plugin is a shared library that exports one function, mesgd_plugin_entry. mesgd loads the
 * library named by `path` in a `type = "plugin"` entry of [[auth.providers]], calls the entry
 * with its own ABI version, and uses the function table the plugin returns. The Rust crate
 * mesgd-plugin-api declares the same items (module `abi`); the two are kept identical.
 *
 * Handshake
 *   const struct mesgd_plugin_v1 *mesgd_plugin_entry(uint32_t host_abi_version);
 *   Return a pointer to a table that lives as long as the library (a static), or NULL when
 *   MESGD_PLUGIN_ABI_MAJOR_OF(host_abi_version) is not a major version the plugin implements.
 *   The table starts with abi_version and struct_size, which the host checks before it reads
 *   anything else.
 *
 * Versioning promise
 *   An ABI version is (major << 16) | minor. Within major version 1 the table only grows: new
 *   members are appended or take over a reserved slot (which version 1.0 plugins leave NULL);
 *   no member changes type or meaning. A host accepts a plugin whose major version equals its
 *   own and whose struct_size covers every member the host needs; it uses a member added in
 *   minor version N only when the plugin's minor version is at least N. Another major version
 *   is refused at start. Request JSON may gain fields in a minor version: ignore the ones you
 *   do not know. Answer JSON fields the host does not know make the answer invalid.
 *
 * Threads
 *   create runs once per [[auth.providers]] entry at start. authenticate runs on a pool of
 *   threads, several calls at once on the same instance: it must be thread-safe. destroy runs
 *   once, after every call on the instance has returned. mesgd never unloads the library.
 *
 * Memory
 *   Whoever allocates frees. Input buffers are the host's, borrowed for the duration of the
 *   call (and not NUL-terminated). Every struct mesgd_buffer the plugin fills in is released by
 *   the host through the plugin's free_buffer, with the same ptr and len.
 *
 * JSON (UTF-8)
 *   config   the entry's `config` table as an object; {} when the entry has none.
 *   request  {"client_id": "c1", "username": "alice" | null, "password": base64 | null,
 *             "peer_addr": "ip:port" | null, "protocol": "mqtt-3.1" | "mqtt-3.1.1" | "mqtt-5" | ...,
 *             "listener": "mqtt", "cert_common_name": "device-7" | null}
 *   answer   {"result": "allow" | "deny" | "next",
 *             "username": "..."            (allow only; replaces the client's username),
 *             "acl": [{"pattern": "devices/%u/#", "permission": "read" | "write" |
 *                      "readwrite" | "rw" | "all" | "deny"}, ...] | null
 *                                          (allow only; absent or null = unrestricted,
 *                                           [] = no topic at all),
 *             "code": "bad_credentials" | "not_authorized"   (deny only; default bad_credentials),
 *             "reason": "..."              (any result; written to the broker's log)}
 */

#ifndef MESGD_PLUGIN_H
#define MESGD_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MESGD_PLUGIN_ABI_MAJOR 1
#define MESGD_PLUGIN_ABI_MINOR 0
#define MESGD_PLUGIN_ABI_VERSION ((uint32_t)((MESGD_PLUGIN_ABI_MAJOR << 16) | MESGD_PLUGIN_ABI_MINOR))
#define MESGD_PLUGIN_ABI_MAJOR_OF(version) ((uint32_t)(version) >> 16)
#define MESGD_PLUGIN_ABI_MINOR_OF(version) ((uint32_t)(version) & 0xffffu)

/* The name of the one exported symbol. */
#define MESGD_PLUGIN_ENTRY_SYMBOL "mesgd_plugin_entry"

/* Status of create and authenticate. */
#define MESGD_PLUGIN_OK 0     /* the output holds the result */
#define MESGD_PLUGIN_ERROR 1  /* the output holds a UTF-8 message (or nothing) */

/* The longest name and version text, in bytes, without the terminating NUL. */
#define MESGD_PLUGIN_MAX_NAME_LEN 64

#define MESGD_PLUGIN_RESERVED_SLOTS 8

/* Bytes allocated by the plugin, released by the host through free_buffer(ptr, len). */
struct mesgd_buffer {
    uint8_t *ptr;
    size_t len;
};

struct mesgd_plugin_v1 {
    /* MESGD_PLUGIN_ABI_VERSION as the plugin was built. */
    uint32_t abi_version;
    /* sizeof(struct mesgd_plugin_v1) as the plugin was built. */
    uint32_t struct_size;

    /* The plugin's name: 1 to 64 bytes of A-Z a-z 0-9 _ . -, NUL-terminated, static. */
    const char *(*name)(void);
    /* The plugin's own version, free text of at most 64 bytes, NUL-terminated, static. */
    const char *(*version)(void);

    /* Creates an instance from the config JSON. On MESGD_PLUGIN_OK set *out_instance; on
     * MESGD_PLUGIN_ERROR you may fill *out_error with a message (mesgd refuses to start and
     * shows it). */
    int32_t (*create)(const uint8_t *config_json, size_t config_len, void **out_instance,
                      struct mesgd_buffer *out_error);

    /* Decides about one connect. On MESGD_PLUGIN_OK fill *out_response with the answer JSON;
     * on MESGD_PLUGIN_ERROR with a message (the client is then denied, unless the entry says
     * on_error = "next"). Must be thread-safe. */
    int32_t (*authenticate)(void *instance, const uint8_t *request_json, size_t request_len,
                            struct mesgd_buffer *out_response);

    /* Releases a buffer this plugin filled in. */
    void (*free_buffer)(uint8_t *ptr, size_t len);

    /* Releases an instance. */
    void (*destroy)(void *instance);

    /* Room to grow within major version 1: set to NULL. */
    void (*reserved[MESGD_PLUGIN_RESERVED_SLOTS])(void);
};

/* The entry point every plugin library exports. */
const struct mesgd_plugin_v1 *mesgd_plugin_entry(uint32_t host_abi_version);

#ifdef __cplusplus
}
#endif

#endif /* MESGD_PLUGIN_H */
