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
 * When the process is out of descriptors (EMFILE, ENFILE), gRPC would
 * take the error for a dead listener and never accept again: the wrapper
 * instead closes one descriptor it keeps in reserve, accepts and closes
 * each waiting connection the same way (logged as
 * "transport.out_of_descriptors"), and answers EAGAIN, so the listener
 * lives on and accepts again once descriptors are free.
 * Every other accept4 in the process (the metrics listener's) passes
 * through untouched.
 *
 * Counting needs no hook on close: each admitted connection is kept as
 * (fd, inode) and counts while that fd is still a socket with that inode
 * (a socket's inode is not reused while it is open; a reused fd number
 * has another). The list is swept when it is full, so a connection is
 * never refused because of one that has gone.
 *
 * The peer of a connection on a guarded unix listener. A caller's tenant
 * there comes from its uid (SO_PEERCRED), but gRPC hands the per-call
 * check nothing of the connection except its peer string, which gRPC 1.51
 * builds from getpeername(2) on the accepted socket ("unix:" + the path
 * the client's socket is bound to; empty when unbound). So the module also
 * defines getpeername, and for such a connection answers with an address
 * of its own making: "/workspaced-peer/NONCE/UID", UID read with
 * SO_PEERCRED when the connection was accepted ("none" when it could not
 * be). Three things keep a client from passing for another uid: its own
 * path never shows, since every connection on the listener gets the
 * made-up address; to produce that form by a path of its own it would have
 * to bind under /workspaced-peer, which only root can make; and NONCE, 128
 * random bits drawn once per process and sent to no client (the peer
 * string stays in the server; gRPC logs it only with its tracing on).
 * ws_conncap_peer_uid reads the uid back from the peer string. The same
 * address is also written into what accept4 returns, so the scheme holds
 * for a gRPC that names the peer from it.
 *
 * Thread safety: all functions, any thread (one mutex).
 */
#ifndef WS_RPC_CONNCAP_H
#define WS_RPC_CONNCAP_H

#include <stdbool.h>
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
/* Connections closed on accept since the start because the process was
 * out of descriptors (the reserve descriptor's doing, see conncap.c). */
uint64_t ws_conncap_shed(void);

/* The uid of the process at the other end of a connection accepted on the
 * guarded unix listener, from the call's peer string (grpc_call_get_peer);
 * false for any other peer string, a forged one included. */
bool ws_conncap_peer_uid(const char *peer, uint32_t *uid);

#endif
