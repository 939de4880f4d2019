/* A bound on the connections the gRPC listener holds at once.
 *
 * gRPC 1.51's C core has no setting for it (later releases have
 * grpc.max_allowed_incoming_connections), so the bound sits where the
 * connections come in. gRPC's TCP server accepts with accept4(2); this
 * module defines accept4 in the server's executable, which the dynamic
 * linker finds before libc's, and passes every call on to the next
 * definition (libc's, or a sanitizer's). A connection accepted on a
 * guarded listener while the bound is reached is closed at once, before
 * gRPC sees it: the client sees its connection reset (UNAVAILABLE) and may
 * retry. The wrapper then accepts the next one itself, so a refusal never
 * leaves the rest of the backlog waiting for the next readiness event.
 * Every other accept4 in the process (the metrics listener's) passes
 * through untouched.
 *
 * Counting needs no hook on close: each admitted connection is kept as
 * (fd, inode) and counts while that fd is still a socket with that inode
 * (a socket's inode is not reused while it is open; a reused fd number
 * has another). The list is swept when it is full, so a connection is
 * never refused because of one that has gone.
 *
 * Thread safety: all functions, any thread (one mutex).
 */
#ifndef WS_RPC_CONNCAP_H
#define WS_RPC_CONNCAP_H

#include <stdint.h>

/* Largest bound. */
#define WS_CONNCAP_MAX 1048576u

/* Guards the process's listening sockets bound to `port` (TCP, any
 * address; the gRPC server's, right after it bound them) or, with port 0,
 * to the unix socket `unix_path`: at most `max` (1..WS_CONNCAP_MAX)
 * connections accepted on them may be open at once. Replaces an earlier
 * bound. 0, -ENOENT when no such listener is open, -EINVAL, -ENOMEM. */
int ws_conncap_guard(int port, const char *unix_path, unsigned max);

/* Stops guarding (what was accepted stays open). */
void ws_conncap_release(void);

/* Connections accepted on the guarded listeners that are open now. */
unsigned ws_conncap_open(void);

/* Connections refused since the start. */
uint64_t ws_conncap_refused(void);

#endif
