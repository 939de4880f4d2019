/* Exec: declared, answered UNIMPLEMENTED until the exec layer lands. */
#include "server/rpc/services/internal.h"
#include "workspace/v1/exec.pb-c.h"

static void unimplemented(struct ws_call *call, const ProtobufCMessage *req)
{
    (void)req;
    ws_call_fail_status(call, GRPC_STATUS_UNIMPLEMENTED, "UNIMPLEMENTED",
                        "command execution is not available in this server version");
}

size_t ws_services_exec(struct ws_services *s, struct ws_rpc_method *out)
{
    static const struct {
        const char *path;
        enum ws_rpc_kind kind;
        const ProtobufCMessageDescriptor *req;
    } m[] = {
        {"/workspace.v1.Exec/Run", WS_RPC_UNARY, &workspace__v1__run_request__descriptor},
        {"/workspace.v1.Exec/Start", WS_RPC_BIDI, &workspace__v1__start_request__descriptor},
        {"/workspace.v1.Exec/Attach", WS_RPC_SERVER_STREAM,
         &workspace__v1__attach_request__descriptor},
        {"/workspace.v1.Exec/ListProcesses", WS_RPC_UNARY,
         &workspace__v1__list_processes_request__descriptor},
        {"/workspace.v1.Exec/SendSignal", WS_RPC_UNARY,
         &workspace__v1__send_signal_request__descriptor},
    };
    size_t n = sizeof(m) / sizeof(m[0]);

    for (size_t i = 0; i < n; i++)
        out[i] = (struct ws_rpc_method){
            .path = m[i].path,
            .kind = m[i].kind,
            .request = m[i].req,
            .on_start = unimplemented,
            .method_data = s,
        };
    return n;
}
