// Package workspaced is the Go client of workspaced, the service that gives
// AI agents a workspace: a confined file system plus streamed command
// execution behind a gRPC API (proto/workspace/v1).
//
// The package is a thin layer over the generated stubs: it adds the
// connection defaults, the bearer token, typed errors decoded from the
// server's google.rpc.ErrorInfo, retries of transient Open failures, and
// Go-shaped handles for files and processes.
//
//	c, err := workspaced.Connect(ctx, "")  // WORKSPACED_ADDR, WORKSPACED_TOKEN
//	providers, err := c.Providers(ctx)
//	if available(providers, "local-sandbox") { // ProviderInfo.Available
//		ws, err = c.Open(ctx, workspaced.LocalSandbox(nil), &workspaced.Capabilities{
//			Fs:    &workspaced.FsCapability{},
//			Shell: &workspaced.ShellCapability{AllowedCommands: []string{"sh", "wc"}},
//		})
//	} else { // files only
//		ws, err = c.Open(ctx, workspaced.Memory(), &workspaced.Capabilities{Fs: &workspaced.FsCapability{}})
//	}
//	defer ws.Close(ctx)
//
// Allowing "sh" is only sound inside a sandbox (local-sandbox, docker):
// `sh -c` runs any program, so once sh is allowed the command guard
// constrains nothing, and on local-bash, which has no isolation, the
// workspace's commands could then do whatever the server's user can.
// Without a sandbox, use files only, or an allowlist of commands that
// cannot start others.
//
// Behind a front proxy that balances several workspaced nodes, a workspace
// lives on the node that opened it. Open and Resolve read the node's name
// from the `x-workspace-node` response header, and every later call about
// that workspace sends it back so that the front routes it there (see
// NodeHeader and Workspace.Node). Connected to one server directly, no
// header is seen and none is sent.
//
// Addresses are "unix:/ABSOLUTE/PATH" (also written "unix:///ABSOLUTE/PATH")
// for the server's unix socket, its default, or "host:port" for TCP. On the
// socket the server knows the caller from the socket's peer credentials, so
// no token is needed; a TCP listener always asks for a token or a client
// certificate.
package workspaced

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	pb "workspaced.dev/go/gen/workspace/v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// Types of the API used as-is: the generated messages already are the most
// precise description, and aliasing them spares callers a second import.
type (
	Capabilities       = pb.Capabilities
	FsCapability       = pb.FsCapability
	ShellCapability    = pb.ShellCapability
	MemoryConfig       = pb.MemoryConfig
	LocalBashConfig    = pb.LocalBashConfig
	LocalSandboxConfig = pb.LocalSandboxConfig
	DockerConfig       = pb.DockerConfig
	WorkspaceRef       = pb.WorkspaceRef
	ProviderInfo       = pb.ProviderInfo
	RuntimeInfo        = pb.RuntimeInfo
	WorkspaceSummary   = pb.WorkspaceSummary
	DescribeResponse   = pb.DescribeResponse
	FileInfo           = pb.FileInfo
	Exited             = pb.Exited
	StreamStats        = pb.StreamStats
	ProcessInfo        = pb.ProcessInfo
	PtySize            = pb.PtySize
	GrepMatch          = pb.GrepMatch
	GrepSummary        = pb.GrepSummary
	Policy             = pb.Policy
	ServerInfo         = pb.ServerInfo
)

// Environment variables that supply defaults to Connect.
const (
	EnvAddr  = "WORKSPACED_ADDR"
	EnvToken = "WORKSPACED_TOKEN"
)

// DefaultAddr is the server's own default listen address: its unix socket.
const DefaultAddr = "unix:/run/workspaced/workspaced.sock"

// NodeHeader is the metadata key that pins a call to one node behind a
// front proxy. The front names the node that answered Open or Resolve in
// this response header; the client sends it back on every call about that
// workspace, and the front refuses a name it does not know with
// UNAVAILABLE.
const NodeHeader = "x-workspace-node"

// nodeOf returns the node a response header names, or "".
func nodeOf(md metadata.MD) string {
	if v := md.Get(NodeHeader); len(v) > 0 {
		return v[0]
	}
	return ""
}

type options struct {
	token         string
	tokenSet      bool
	tls           *tls.Config
	tlsErr        error
	openRetry     RetryPolicy
	dialOpts      []grpc.DialOption
	evictionRetry bool
}

// Option configures Connect.
type Option func(*options)

// WithToken sends token as "authorization: Bearer <token>" on every call;
// it overrides WORKSPACED_TOKEN. An empty token sends nothing.
func WithToken(token string) Option {
	return func(o *options) { o.token, o.tokenSet = token, true }
}

// WithTLS uses TLS with the given configuration instead of plaintext.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) { o.tls = cfg.Clone() }
}

// WithTLSFiles uses TLS with PEM files: rootCA verifies the server (empty:
// the system roots), certFile/keyFile is the client certificate (empty:
// none), serverName overrides the name checked in the server's certificate
// (empty: the host of the address, "localhost" for a unix socket).
func WithTLSFiles(rootCA, certFile, keyFile, serverName string) Option {
	return func(o *options) {
		cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
		if rootCA != "" {
			pem, err := os.ReadFile(rootCA)
			if err != nil {
				o.tlsErr = err
				return
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				o.tlsErr = fmt.Errorf("workspaced: no certificate in %s", rootCA)
				return
			}
			cfg.RootCAs = pool
		}
		if certFile != "" || keyFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				o.tlsErr = err
				return
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		o.tls = cfg
	}
}

// WithOpenRetry replaces the default retry policy of Open (see
// DefaultRetryPolicy) for this client; Open's own option wins over it.
func WithOpenRetry(p RetryPolicy) Option {
	return func(o *options) { o.openRetry = p }
}

// WithEvictionRetry turns the automatic re-resolve of Workspace handles on
// (the default) or off: on *WorkspaceEvicted, or a *WorkspaceFailed with
// metadata resolve="true", a call safe to repeat resolves the ref once and
// is made again; see Workspace for what it does.
func WithEvictionRetry(on bool) Option {
	return func(o *options) { o.evictionRetry = on }
}

// WithDialOptions passes extra options to grpc.DialContext.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// Client is a connection to one workspaced server. It is safe for
// concurrent use; Close it when done.
type Client struct {
	conn      *grpc.ClientConn
	providers pb.ProvidersClient
	ws        pb.WorkspacesClient
	fs        pb.FileSystemClient
	exec      pb.ExecClient
	health    healthpb.HealthClient
	openRetry RetryPolicy
	// evictionRetry: Workspace handles re-resolve their ref once when a
	// call finds the workspace evicted or its box or container lost
	// (WORKSPACE_FAILED with resolve="true").
	evictionRetry bool
}

// bearer implements credentials.PerRPCCredentials. Plaintext is allowed on
// purpose: on the server's unix socket TLS adds nothing, and a front that
// terminates TLS may forward plaintext to the client's own side.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// Connect dials the server at addr; empty means $WORKSPACED_ADDR, else
// DefaultAddr. addr is either
//
//   - "unix:/ABSOLUTE/PATH" or "unix:///ABSOLUTE/PATH": the server's unix
//     socket (the server's default is DefaultAddr). The client dials the
//     socket itself and names the server "localhost" in the :authority
//     header, as gRPC does for unix targets; a TLS server on a socket is
//     therefore checked for the name "localhost" unless WithTLS or
//     WithTLSFiles names another. A relative path is refused: it would
//     depend on the caller's working directory.
//   - "host:port": TCP. The server refuses TCP callers without a token or a
//     client certificate (WithToken, WithTLSFiles).
//
// The connection is made lazily, as gRPC does: an unreachable server shows
// up as an UNAVAILABLE error on the first call, which Open retries.
func Connect(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	o := options{openRetry: DefaultRetryPolicy(), evictionRetry: true}
	for _, opt := range opts {
		opt(&o)
	}
	if o.tlsErr != nil {
		return nil, o.tlsErr
	}
	if addr == "" {
		addr = os.Getenv(EnvAddr)
	}
	if addr == "" {
		addr = DefaultAddr
	}
	if !o.tokenSet {
		o.token = os.Getenv(EnvToken)
	}
	target, sock, err := dialTarget(addr)
	if err != nil {
		return nil, err
	}
	dial := []grpc.DialOption{}
	if o.tls != nil {
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(o.tls)))
	} else {
		// grpc.WithInsecure is deprecated in newer grpc-go for
		// credentials/insecure.NewCredentials(), which the grpc-go this
		// module builds with (1.33, Debian 12's) does not have yet.
		dial = append(dial, grpc.WithInsecure())
	}
	if o.token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer(o.token)))
	}
	if sock != "" {
		// Dialing the socket here, rather than handing gRPC a "unix:"
		// target, works the same with every grpc-go version (the unix
		// resolver and its target forms came and changed over releases).
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}))
	}
	// The server accepts messages up to 4 MiB; a ListDir answer can come
	// close to that, and gRPC's receive default is exactly 4 MiB.
	dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)))
	dial = append(dial, o.dialOpts...)
	conn, err := grpc.DialContext(ctx, target, dial...)
	if err != nil {
		return nil, wrapErr(err)
	}
	return &Client{
		conn:      conn,
		providers: pb.NewProvidersClient(conn),
		ws:        pb.NewWorkspacesClient(conn),
		fs:        pb.NewFileSystemClient(conn),
		exec:      pb.NewExecClient(conn),
		health:    healthpb.NewHealthClient(conn),
		openRetry: o.openRetry,

		evictionRetry: o.evictionRetry,
	}, nil
}

// dialTarget returns the gRPC target for addr and, for a unix socket
// address, the socket's path (else "").
func dialTarget(addr string) (target, sock string, err error) {
	if !strings.HasPrefix(addr, "unix:") {
		return addr, "", nil
	}
	path := strings.TrimPrefix(addr, "unix:")
	path = strings.TrimPrefix(path, "//")
	if !strings.HasPrefix(path, "/") {
		return "", "", fmt.Errorf("workspaced: address %q: a unix socket address is unix:/ABSOLUTE/PATH or unix:///ABSOLUTE/PATH", addr)
	}
	// The target only names the server for :authority; the dialer ignores
	// it.
	return "passthrough:///localhost", path, nil
}

// Close closes the connection. Workspaces stay open on the server (use
// Workspace.Close for that); their refs can be resolved again later.
func (c *Client) Close() error { return c.conn.Close() }

// Conn exposes the underlying connection, for calling the generated stubs
// directly.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Healthy reports whether the server answers the standard health check as
// SERVING.
func (c *Client) Healthy(ctx context.Context) (bool, error) {
	r, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return false, wrapErr(err)
	}
	return r.GetStatus() == healthpb.HealthCheckResponse_SERVING, nil
}

// Providers lists the four provider kinds and whether each is usable now
// by this caller: one the operator's policy does not allow the caller's
// tenant is not available, with a reason starting "POLICY".
func (c *Client) Providers(ctx context.Context) ([]*ProviderInfo, error) {
	r, err := c.providers.ListProviders(ctx, &pb.ListProvidersRequest{})
	if err != nil {
		return nil, wrapErr(err)
	}
	return r.GetProviders(), nil
}

// Policy returns the operator's policy for the caller's tenant as the
// server applies it to an Open now: the providers, network, bind roots,
// pass_env names, command ceiling and docker images, pulls and users it
// allows. Asking Open for more fails with *PolicyDenied.
func (c *Client) Policy(ctx context.Context) (*Policy, error) {
	r, err := c.providers.ListProviders(ctx, &pb.ListProvidersRequest{})
	if err != nil {
		return nil, wrapErr(err)
	}
	return r.GetPolicy(), nil
}

// ListOption filters List and ListPage.
type ListOption func(*pb.ListRequest)

// LabelSelector keeps the workspaces whose labels meet every
// comma-separated requirement: "key=value" (or "key==value"), "key!=value"
// (also true when the label is absent), "key" (present), "!key" (absent).
// A malformed selector is *Malformed.
func LabelSelector(selector string) ListOption {
	return func(r *pb.ListRequest) { r.LabelSelector = selector }
}

// ListName keeps only the workspace of this name (WithName at Open).
func ListName(name string) ListOption {
	return func(r *pb.ListRequest) { r.Name = name }
}

// PageSize is the most workspaces one response holds: 0 is the server's
// 100, above 1000 is *Limit. List still returns every page.
func PageSize(n uint32) ListOption {
	return func(r *pb.ListRequest) { r.PageSize = n }
}

// List returns the caller's workspaces that are not closed, in id order,
// every page of them (see ListPage for one page at a time).
func (c *Client) List(ctx context.Context, opts ...ListOption) ([]*WorkspaceSummary, error) {
	var all []*WorkspaceSummary
	token := ""
	for {
		page, next, err := c.ListPage(ctx, token, opts...)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		token = next
	}
}

// ListPage returns one page of List: the page after pageToken ("" for the
// first) and the token of the next page, "" after the last. The token is
// only valid with the same filters; an invalid one is *Malformed.
func (c *Client) ListPage(ctx context.Context, pageToken string, opts ...ListOption) ([]*WorkspaceSummary, string, error) {
	req := &pb.ListRequest{PageToken: pageToken}
	for _, opt := range opts {
		opt(req)
	}
	r, err := c.ws.List(ctx, req)
	if err != nil {
		return nil, "", wrapErr(err)
	}
	return r.GetWorkspaces(), r.GetNextPageToken(), nil
}

// Provider selects the backend of a new workspace; use Memory, LocalBash,
// LocalSandbox or Docker.
type Provider interface {
	setOn(*pb.OpenRequest)
}

type providerFunc func(*pb.OpenRequest)

func (f providerFunc) setOn(r *pb.OpenRequest) { f(r) }

// Memory is an in-process file tree (fs only, lost on server restart).
func Memory() Provider {
	return providerFunc(func(r *pb.OpenRequest) {
		r.Provider = &pb.OpenRequest_Memory{Memory: &pb.MemoryConfig{}}
	})
}

// LocalBash is a host directory with host subprocesses, guarded at the
// application layer only: it is not isolation, and the server offers it
// only to tenants whose operator policy lists it (else Open fails with
// *PolicyDenied). Untrusted agents belong in LocalSandbox or Docker.
//
// LocalBash() asks for no caps; LocalBash(&LocalBashConfig{PidsLimit: 64,
// MemoryMb: 512, Cpus: 1}) caps the workspace's processes, memory and CPU,
// or makes Open fail with *WorkspaceFailed when the server cannot enforce
// one of them. Only the first cfg counts; nil is no caps.
func LocalBash(cfg ...*LocalBashConfig) Provider {
	c := &pb.LocalBashConfig{}
	if len(cfg) > 0 && cfg[0] != nil {
		c = cfg[0]
	}
	return providerFunc(func(r *pb.OpenRequest) {
		r.Provider = &pb.OpenRequest_LocalBash{LocalBash: c}
	})
}

// LocalSandbox runs every command in bubblewrap namespaces plus seccomp.
// cfg may be nil for the defaults.
func LocalSandbox(cfg *LocalSandboxConfig) Provider {
	if cfg == nil {
		cfg = &pb.LocalSandboxConfig{}
	}
	return providerFunc(func(r *pb.OpenRequest) {
		r.Provider = &pb.OpenRequest_LocalSandbox{LocalSandbox: cfg}
	})
}

// Docker is a hardened container over the workspace directory; cfg.Image
// is required. cfg.Runtime "runsc" runs it under gVisor (Providers says
// whether the daemon has it: ProviderInfo.Runtimes); "" is the daemon's
// default, runc.
func Docker(cfg *DockerConfig) Provider {
	return providerFunc(func(r *pb.OpenRequest) {
		r.Provider = &pb.OpenRequest_Docker{Docker: cfg}
	})
}

// OpenOption configures one Open call.
type OpenOption func(*openOptions)

type openOptions struct {
	retry RetryPolicy
	req   *pb.OpenRequest
}

// OpenRetry sets the retry policy of this Open call; MaxAttempts 1
// disables retries.
func OpenRetry(p RetryPolicy) OpenOption {
	return func(o *openOptions) { o.retry = p }
}

// WithTTL gives the workspace an absolute lifetime: it expires d after
// Open (Workspace.Extend moves that). 0: none of its own; the server's
// --max-lifetime caps it, and asking for more is *Limit.
func WithTTL(d time.Duration) OpenOption {
	return func(o *openOptions) { lifetimeOf(o.req).TtlMs = durationMs(d) }
}

// WithIdleTimeout makes the workspace expire once it has been idle for d:
// no call on it and no command running. 0: the server's default.
func WithIdleTimeout(d time.Duration) OpenOption {
	return func(o *openOptions) { lifetimeOf(o.req).IdleTimeoutMs = durationMs(d) }
}

// WithLabels labels the workspace, for List's LabelSelector (at most 64;
// see OpenRequest.labels for their form). Later calls add to the set.
func WithLabels(labels map[string]string) OpenOption {
	return func(o *openOptions) {
		if o.req.Labels == nil {
			o.req.Labels = map[string]string{}
		}
		for k, v := range labels {
			o.req.Labels[k] = v
		}
	}
}

// WithName names the workspace: 1-63 bytes of [a-z0-9-], unique among the
// tenant's open workspaces (a taken name is *Exists, its metadata naming
// the workspace that has it).
func WithName(name string) OpenOption {
	return func(o *openOptions) { o.req.Name = name }
}

// WithEnv is environment every command of the workspace gets (a command's
// own Cmd.Env overrides it); Describe shows it. Names follow Cmd.Env's
// rules (*EnvDenied). Later calls add to the set.
func WithEnv(env map[string]string) OpenOption {
	return func(o *openOptions) {
		if o.req.Env == nil {
			o.req.Env = map[string]string{}
		}
		for k, v := range env {
			o.req.Env[k] = v
		}
	}
}

// WithSecrets gives the workspace secrets: a command gets one in its
// environment only when it names it (Cmd.Secrets). The server holds the
// values in memory only, never on disk, in a ref, a log or Describe; after
// a restart the workspace is secrets_missing until Workspace.SetSecrets.
// Later calls add to the set.
func WithSecrets(secrets map[string]string) OpenOption {
	return func(o *openOptions) {
		if o.req.Secrets == nil {
			o.req.Secrets = map[string]string{}
		}
		for k, v := range secrets {
			o.req.Secrets[k] = v
		}
	}
}

// WithRequestID sets the Open's request id (1-128 bytes of
// [A-Za-z0-9._:-]). Open always sends one, a fresh random id per call
// unless this gives it, and keeps it across its own retries, so that an
// attempt whose answer was lost returns the workspace it opened instead of
// opening a second. Give one yourself to make your own retries of Open
// (after a crash, say) safe as well: the server answers the same request
// id with the same workspace for 10 minutes, and a different request with
// it is *RequestIDReused.
func WithRequestID(id string) OpenOption {
	return func(o *openOptions) { o.req.RequestId = id }
}

func lifetimeOf(r *pb.OpenRequest) *pb.Lifetime {
	if r.Lifetime == nil {
		r.Lifetime = &pb.Lifetime{}
	}
	return r.Lifetime
}

// durationMs rounds d up to whole milliseconds, so that a positive
// duration never becomes 0 ("none").
func durationMs(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64((d + time.Millisecond - 1) / time.Millisecond)
}

// newRequestID returns a random request id for Open: 128 bits in hex.
func newRequestID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("workspaced: a request id: %w", err)
	}
	return "go-" + hex.EncodeToString(b[:]), nil
}

// Open creates a workspace. caps nil declares nothing, which gives `fs`
// with the server's defaults. Transient failures (the backend is down for
// now, the server is unreachable, the first attempt is still opening) are
// retried per the retry policy, every attempt with the same request id
// (WithRequestID); anything else is returned at once, typed (e.g.
// *CapabilityMissing).
func (c *Client) Open(ctx context.Context, provider Provider, caps *Capabilities, opts ...OpenOption) (*Workspace, error) {
	if provider == nil {
		return nil, errors.New("workspaced: Open needs a provider")
	}
	o := openOptions{retry: c.openRetry, req: &pb.OpenRequest{Capabilities: caps}}
	for _, opt := range opts {
		opt(&o)
	}
	req := o.req
	provider.setOn(req)
	if req.RequestId == "" {
		id, err := newRequestID()
		if err != nil {
			return nil, err
		}
		req.RequestId = id
	}
	var w *pb.Workspace
	var node string
	err := o.retry.do(ctx, openRetryable, func(ctx context.Context) error {
		// Each attempt may land on another node: only the attempt
		// that succeeded names the workspace's node.
		var md metadata.MD
		r, err := c.ws.Open(ctx, req, grpc.Header(&md))
		if err != nil {
			return wrapErr(err)
		}
		w, node = r.GetWorkspace(), nodeOf(md)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return newWorkspace(c, w, node), nil
}

// openRetryable: what a retried Open may repeat. With its request id, an
// attempt that reached the server is answered with the workspace it
// opened, so besides the transient failures, RETRY (the first attempt is
// still opening) is worth asking again.
func openRetryable(err error) bool {
	return isTransient(err) || errors.Is(err, ReasonRetry)
}

// ResolveOption configures one Resolve call.
type ResolveOption func(*resolveOptions)

type resolveOptions struct {
	node string
}

// OnNode sends Resolve to the named node behind a front proxy (the one
// Workspace.Node reported when the ref was saved): a ref is only known on
// the node that holds its workspace. "" sends it anywhere, as without the
// option. A name the front does not know is an UNAVAILABLE *Error.
func OnNode(node string) ResolveOption {
	return func(o *resolveOptions) { o.node = node }
}

// Resolve turns a ref (from Workspace.Ref, possibly saved by another
// process) back into a usable Workspace. A closed workspace's ref is
// *WorkspaceEvicted; a tampered one *BadRef. The workspace is pinned to the
// node the response names, else to the node given with OnNode.
func (c *Client) Resolve(ctx context.Context, ref *WorkspaceRef, opts ...ResolveOption) (*Workspace, error) {
	var o resolveOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.node != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, NodeHeader, o.node)
	}
	var md metadata.MD
	r, err := c.ws.Resolve(ctx, &pb.ResolveRequest{Ref: ref}, grpc.Header(&md))
	if err != nil {
		return nil, wrapErr(err)
	}
	node := nodeOf(md)
	if node == "" {
		node = o.node
	}
	return newWorkspace(c, r.GetWorkspace(), node), nil
}

// ResolveToken is Resolve for a ref saved as its raw token bytes.
func (c *Client) ResolveToken(ctx context.Context, token []byte, opts ...ResolveOption) (*Workspace, error) {
	return c.Resolve(ctx, &pb.WorkspaceRef{Token: token}, opts...)
}

// Workspace returns a handle for an id known to be open (no call is made).
// Behind a front proxy, OnNode names the node that holds it.
func (c *Client) Workspace(id string, opts ...ResolveOption) *Workspace {
	var o resolveOptions
	for _, opt := range opts {
		opt(&o)
	}
	return newWorkspace(c, &pb.Workspace{Id: id}, o.node)
}
