/* Where the server listens, and who may: the rules for a listen address
 * and the file modes of a unix socket.
 *
 * A unix socket is the default listener. Its directory is made 0750 when
 * missing and the socket is 0660, both given to the group WS_LISTEN_GROUP
 * when that group exists: who may connect is who may reach the socket, and
 * on it every caller's tenant comes from its uid (server/rpc/conncap.h,
 * the call's peer). TCP carries no uid, so every TCP listener, loopback
 * included, needs tokens or client certificates: loopback is reachable by
 * every local user and by any box that shares the host's network. The
 * exception is --insecure-loopback, for development only, which the
 * server refuses to honour as root.
 */
#ifndef WS_RPC_LISTEN_H
#define WS_RPC_LISTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The default listen address. */
#define WS_LISTEN_DEFAULT "unix:/run/workspaced/workspaced.sock"
/* The group a unix socket and the directory made for it are given to,
 * when it exists. */
#define WS_LISTEN_GROUP "workspaced"

/* Whether `addr` is "unix:PATH" (PATH not empty). */
bool ws_listen_is_unix(const char *addr);

/* Whether `addr` is HOST:PORT with HOST a literal loopback address
 * (127.0.0.0/8, [::1]) or "localhost". */
bool ws_listen_is_loopback(const char *addr);

/* The listener rules: a unix socket needs nothing; a TCP address needs
 * has_tokens or has_client_ca, unless it is loopback and
 * insecure_loopback is set; insecure_loopback is refused outright when
 * euid is 0 (the server would hand a root shell to every local user). TLS
 * and plaintext are not looked at here. Returns 0, or -1 with one sentence
 * in why[0..why_len) that names the address and what to give. */
int ws_listen_check(const char *addr, bool has_tokens, bool has_client_ca, bool insecure_loopback,
                    uid_t euid, char *why, size_t why_len);

/* Before binding unix socket `path`: makes its directory (the last
 * component only) 0750 when it does not exist, given to `group` (NULL:
 * WS_LISTEN_GROUP) when that group exists. An existing directory is left
 * as it is. Returns 0 or -errno with why. */
int ws_listen_prepare_unix(const char *path, const char *group, char *why, size_t why_len);

/* After binding: the socket `path` becomes 0660, and is given to `group`
 * (NULL: WS_LISTEN_GROUP) when that group exists. Returns 0 or -errno
 * with why. */
int ws_listen_secure_unix(const char *path, const char *group, char *why, size_t why_len);

#endif
