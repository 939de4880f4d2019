"""Checks server/deploy/envoy.yaml for consistency without Envoy.

Envoy is not installed here, so this does not prove Envoy accepts the
file; it proves the parts refer to each other and say what the README
promises: TLS in front, HTTP/2 to the nodes over TLS, one route per node
picked by `x-workspace-node`, unknown node names refused, everything else
to any healthy node with the answering node's name in the response, gRPC
health checks that carry a token, connection and request limits, no route
timeout, a stream idle timeout, `authorization` never removed, and every
node of the example (listed in the file's header) present where it must
be and nowhere else. Then it breaks the file in several ways and checks
that each break is caught, so the checks cannot pass vacuously.

Usage: envoy_config_check.py ENVOY_YAML
"""

import copy
import re
import sys

import yaml

TLS_DOWN = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
TLS_UP = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
HCM = ("type.googleapis.com/envoy.extensions.filters.network."
       "http_connection_manager.v3.HttpConnectionManager")
CONN_LIMIT = ("type.googleapis.com/envoy.extensions.filters.network."
              "connection_limit.v3.ConnectionLimit")
HTTP_OPTS_KEY = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
NODE_HEADER = "x-workspace-node"
ANY = "workspaced_any"


def example_nodes(text):
    """The example's nodes from the header comment: {"node-1": "10.0.0.11:7443", ...}."""
    nodes = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        for name, addr in re.findall(r"(node-\d+) (\d+\.\d+\.\d+\.\d+:\d+)", line):
            nodes[name] = addr
    return nodes


def seconds(v):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)s", str(v))
    return float(m.group(1)) if m else None


def endpoints(cluster):
    """[(address:port, node metadata or None)] of a cluster's load assignment."""
    out = []
    la = cluster.get("load_assignment") or {}
    for group in la.get("endpoints") or []:
        for ep in group.get("lb_endpoints") or []:
            sa = ((ep.get("endpoint") or {}).get("address") or {}).get("socket_address") or {}
            meta = (((ep.get("metadata") or {}).get("filter_metadata") or {})
                    .get("workspaced") or {}).get("node")
            out.append(("%s:%s" % (sa.get("address"), sa.get("port_value")), meta))
    return out


def walk(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield path + "/" + str(k), k, v
            yield from walk(v, path + "/" + str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from walk(v, "%s[%d]" % (path, i))


def check(doc, nodes):
    problems = []
    p = problems.append
    if not nodes:
        p("the header names no example node")
    sr = (doc or {}).get("static_resources") or {}
    listeners = sr.get("listeners") or []
    clusters = {c.get("name"): c for c in sr.get("clusters") or []}
    if len(listeners) != 1:
        p("want exactly one listener, found %d" % len(listeners))
        return problems
    lis = listeners[0]
    chains = lis.get("filter_chains") or []
    if len(chains) != 1:
        p("want one filter chain")
        return problems
    chain = chains[0]

    # TLS from the agents, HTTP/2 only.
    ts = chain.get("transport_socket") or {}
    tc = ts.get("typed_config") or {}
    if tc.get("@type") != TLS_DOWN:
        p("the listener does not terminate TLS")
    ctx = tc.get("common_tls_context") or {}
    if ctx.get("alpn_protocols") != ["h2"]:
        p("the listener does not offer h2 by ALPN")
    if not ctx.get("tls_certificates"):
        p("the listener has no certificate")

    filters = chain.get("filters") or []
    types = [(f.get("typed_config") or {}).get("@type") for f in filters]
    if CONN_LIMIT not in types:
        p("no connection_limit filter on the listener")
    elif HCM not in types or types.index(CONN_LIMIT) > types.index(HCM):
        p("connection_limit must come before the HTTP connection manager")
    else:
        cl = filters[types.index(CONN_LIMIT)]["typed_config"]
        if not isinstance(cl.get("max_connections"), int) or cl["max_connections"] <= 0:
            p("connection_limit.max_connections is not a positive number")
    if HCM not in types:
        p("no HTTP connection manager")
        return problems
    hcm = filters[types.index(HCM)]["typed_config"]
    if hcm.get("codec_type") != "HTTP2":
        p("the connection manager is not HTTP/2 only")
    mcs = (hcm.get("http2_protocol_options") or {}).get("max_concurrent_streams")
    if not isinstance(mcs, int) or mcs <= 0:
        p("no per-connection stream limit (http2_protocol_options.max_concurrent_streams)")
    idle = seconds(hcm.get("stream_idle_timeout"))
    if not idle or idle <= 0:
        p("no stream_idle_timeout (0 or missing disables it)")
    if seconds(hcm.get("request_timeout")) not in (None, 0.0):
        p("request_timeout would cut long streams")
    hf = hcm.get("http_filters") or []
    if not hf or (hf[-1].get("typed_config") or {}).get("@type") != ROUTER:
        p("the router is not the last HTTP filter")

    # authorization passes through: nothing removes it anywhere.
    for path, key, value in walk(doc):
        if "remove" in str(key) and isinstance(value, list):
            for v in value:
                if str(v).lower() == "authorization":
                    p("%s removes the authorization header" % path)

    # Routes.
    vhosts = (hcm.get("route_config") or {}).get("virtual_hosts") or []
    if len(vhosts) != 1:
        p("want one virtual host")
        return problems
    routes = vhosts[0].get("routes") or []
    used = set()
    pinned = {}
    seen_refusal = seen_any = False
    for i, r in enumerate(routes):
        name = r.get("name", "#%d" % i)
        m = r.get("match") or {}
        hdrs = m.get("headers") or []
        node_hdrs = [h for h in hdrs if h.get("name") == NODE_HEADER]
        if m.get("prefix") != "/":
            p("route %s does not match every method (prefix /)" % name)
        if "direct_response" in r:
            if not (node_hdrs and node_hdrs[0].get("present_match") is True):
                p("route %s answers directly but is not the unknown-node refusal" % name)
            elif r["direct_response"].get("status") != 503:
                p("route %s: an unknown node must be 503 (gRPC UNAVAILABLE)" % name)
            seen_refusal = True
            if seen_any:
                p("the unknown-node refusal comes after the catch-all route")
            continue
        act = r.get("route") or {}
        cl = act.get("cluster")
        if cl not in clusters:
            p("route %s sends to cluster %r, which is not defined" % (name, cl))
            continue
        used.add(cl)
        if "grpc" not in m:
            p("route %s does not match gRPC requests only" % name)
        if seconds(act.get("timeout")) != 0.0:
            p("route %s has a route timeout (long Start/Attach streams need timeout: 0s)" % name)
        msd = act.get("max_stream_duration") or {}
        if seconds(msd.get("grpc_timeout_header_max")) != 0.0:
            p("route %s does not honour the client's grpc-timeout" % name)
        added = {(h.get("header") or {}).get("key"): (h.get("header") or {}).get("value")
                 for h in r.get("response_headers_to_add") or []}
        if node_hdrs:
            want = (node_hdrs[0].get("string_match") or {}).get("exact")
            if want != cl:
                p("route %s: header %s=%r goes to cluster %r" % (name, NODE_HEADER, want, cl))
            if want in pinned:
                p("node %s is routed twice" % want)
            pinned[want] = name
            if added.get(NODE_HEADER) != want:
                p("route %s does not answer with %s: %s" % (name, NODE_HEADER, want))
            if seen_refusal or seen_any:
                p("route %s comes after the refusal or the catch-all: unreachable" % name)
        else:
            if hdrs:
                p("route %s matches other headers" % name)
            if cl != ANY:
                p("the catch-all route goes to %r, not %s" % (cl, ANY))
            if added.get(NODE_HEADER) != '%UPSTREAM_METADATA(["workspaced", "node"])%':
                p("the catch-all route does not tell which node answered")
            seen_any = True
            if i != len(routes) - 1:
                p("routes after the catch-all %s are unreachable" % name)
    if not seen_refusal:
        p("no route refuses an unknown %s" % NODE_HEADER)
    if not seen_any:
        p("no catch-all route for Open")

    # Clusters.
    for name, c in clusters.items():
        if name not in used:
            p("cluster %s is defined but no route uses it" % name)
        h2 = (((c.get("typed_extension_protocol_options") or {}).get(HTTP_OPTS_KEY) or {})
              .get("explicit_http_config") or {})
        if "http2_protocol_options" not in h2:
            p("cluster %s does not speak HTTP/2 to the nodes" % name)
        up = ((c.get("transport_socket") or {}).get("typed_config") or {})
        if up.get("@type") != TLS_UP:
            p("cluster %s does not use TLS to the nodes" % name)
        elif not ((up.get("common_tls_context") or {}).get("validation_context") or {}).get(
                "trusted_ca"):
            p("cluster %s does not verify the nodes' certificates" % name)
        ths = (c.get("circuit_breakers") or {}).get("thresholds") or []
        if not ths or not all(isinstance(t.get("max_connections"), int) and
                              t["max_connections"] > 0 for t in ths):
            p("cluster %s has no circuit_breakers max_connections" % name)
        hcs = c.get("health_checks") or []
        if not hcs:
            p("cluster %s is not health-checked" % name)
        for hc in hcs:
            g = hc.get("grpc_health_check")
            if g is None:
                p("cluster %s: health check is not grpc.health.v1" % name)
                continue
            md = {(x.get("header") or {}).get("key"): (x.get("header") or {}).get("value")
                  for x in g.get("initial_metadata") or []}
            if not str(md.get("authorization", "")).startswith("Bearer "):
                p("cluster %s: health checks carry no bearer token (nodes refuse them)" % name)
        eps = endpoints(c)
        if name == ANY:
            if ((c.get("common_lb_config") or {}).get("healthy_panic_threshold") or {}).get(
                    "value") != 0:
                p("%s may send Opens to unhealthy nodes (healthy_panic_threshold)" % ANY)
            got = {addr: meta for addr, meta in eps}
            if got != {addr: n for n, addr in nodes.items()} or len(eps) != len(nodes):
                p("%s endpoints %s are not the example's nodes %s" % (ANY, sorted(got.items()),
                                                                        sorted(nodes.items())))
        else:
            if name not in nodes:
                p("cluster %s is no node of the example" % name)
            elif eps != [(nodes[name], name)]:
                p("cluster %s has endpoints %s, want [%s]" % (name, eps, nodes[name]))
    for n in nodes:
        if n not in clusters:
            p("node %s has no cluster" % n)
        if n not in pinned:
            p("node %s has no %s route" % (n, NODE_HEADER))
    return problems


def mutations(doc):
    """(what, broken copy) pairs, each of which check() must catch."""
    def hcm(d):
        return d["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][1][
            "typed_config"]

    def routes(d):
        return hcm(d)["route_config"]["virtual_hosts"][0]["routes"]

    def cluster(d, name):
        return [c for c in d["static_resources"]["clusters"] if c["name"] == name][0]

    def m(what, f):
        d = copy.deepcopy(doc)
        f(d)
        return what, d

    yield m("a cluster removed", lambda d: d["static_resources"]["clusters"].pop())
    yield m("a route to a missing cluster",
            lambda d: routes(d)[0]["route"].__setitem__("cluster", "node-9"))
    yield m("a route timeout", lambda d: routes(d)[1]["route"].__setitem__("timeout", "15s"))
    yield m("no stream idle timeout", lambda d: hcm(d).pop("stream_idle_timeout"))
    yield m("an endpoint moved",
            lambda d: cluster(d, ANY)["load_assignment"]["endpoints"][0]["lb_endpoints"][0][
                "endpoint"]["address"]["socket_address"].__setitem__("address", "10.0.0.99"))
    yield m("authorization stripped",
            lambda d: hcm(d)["route_config"].__setitem__("request_headers_to_remove",
                                                         ["authorization"]))
    yield m("no circuit breaker", lambda d: cluster(d, "node-2").pop("circuit_breakers"))
    yield m("health checks without a token",
            lambda d: cluster(d, "node-1").__setitem__(
                "health_checks", [{"timeout": "2s", "interval": "5s",
                                   "grpc_health_check": {"service_name": ""}}]))
    yield m("the refusal route removed",
            lambda d: routes(d).pop(len(routes(d)) - 2))
    yield m("the catch-all first", lambda d: routes(d).insert(0, routes(d).pop()))
    yield m("HTTP/1 to the nodes", lambda d: cluster(d, ANY).pop("typed_extension_protocol_options"))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    text = open(sys.argv[1]).read()
    doc = yaml.safe_load(text)
    nodes = example_nodes(text)
    problems = check(doc, nodes)
    for pr in problems:
        print("FAIL:", pr)
    if problems:
        return 1
    print("ok: %d nodes (%s), %d clusters, %d routes" % (
        len(nodes), ", ".join("%s=%s" % kv for kv in sorted(nodes.items())),
        len(doc["static_resources"]["clusters"]),
        len(doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][1][
            "typed_config"]["route_config"]["virtual_hosts"][0]["routes"])))
    bad = 0
    for what, broken in mutations(doc):
        found = check(broken, nodes)
        if not found:
            print("FAIL: the check misses", what)
            bad += 1
        else:
            print("ok: caught %s: %s" % (what, found[0]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
