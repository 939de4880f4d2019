/* The workspace.v1 services and grpc.health.v1.Health on top of the RPC
 * core: request validation, registry calls, response building. Handlers
 * turn protobuf requests into registry / fs-ops calls and errors into
 * ws_call_fail; they never touch a file descriptor themselves. */
#ifndef WS_RPC_SERVICES_H
#define WS_RPC_SERVICES_H

#include <stdbool.h>
#include <stddef.h>

#include "server/registry/registry.h"
#include "server/rpc/call.h"

struct ws_services;

/* Handlers share `reg` (not owned). */
int ws_services_new(struct ws_registry *reg, struct ws_services **ret);
/* Only after the RPC server that used the methods has shut down. */
void ws_services_free(struct ws_services *s);

/* The method table to register with ws_rpc_server_new. */
const struct ws_rpc_method *ws_services_methods(struct ws_services *s, size_t *ret_n);

/* Health turns NOT_SERVING (watchers are told, then their streams end). */
void ws_services_drain(struct ws_services *s);

#endif
