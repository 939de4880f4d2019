package workspaced

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/golang/protobuf/proto"

	pb "workspaced.dev/go/gen/workspace/v1"
)

// varint is n as a protobuf base-128 varint.
func varint(n uint64) []byte {
	var out []byte
	for n >= 0x80 {
		out = append(out, byte(n)|0x80)
		n >>= 7
	}
	return append(out, byte(n))
}

// field is one field on the wire: its tag, then (for length-delimited
// fields) the length, then the payload.
func field(number, wireType uint64, payload []byte) []byte {
	out := varint(number<<3 | wireType)
	if wireType == 2 {
		out = append(out, varint(uint64(len(payload)))...)
	}
	return append(out, payload...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// The fields for per-workspace users, runtimes, caps and truncation
// reasons, at the numbers the protos give them: what the client sends is
// checked byte for byte, what it reads is decoded from hand-made bytes, so
// a renumbered field or a config the client drops fails here. No server.
func TestNewFieldsOnTheWire(t *testing.T) {
	req := &pb.OpenRequest{}
	Docker(&DockerConfig{Image: "busybox", Runtime: "runsc"}).setOn(req)
	got, err := proto.Marshal(req.GetDocker())
	if want := cat(field(1, 2, []byte("busybox")), field(8, 2, []byte("runsc"))); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("DockerConfig on the wire = %x, %v; want %x", got, err, want)
	}

	req = &pb.OpenRequest{}
	LocalBash(&LocalBashConfig{PidsLimit: 64, MemoryMb: 512, Cpus: 1.5}).setOn(req)
	got, err = proto.Marshal(req.GetLocalBash())
	cpus := make([]byte, 8)
	binary.LittleEndian.PutUint64(cpus, math.Float64bits(1.5))
	if want := cat(field(1, 0, varint(64)), field(2, 0, varint(512)), field(3, 1, cpus)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("LocalBashConfig on the wire = %x, %v; want %x", got, err, want)
	}
	// Without a config, and with nil, local-bash is still the provider.
	for _, p := range []Provider{LocalBash(), LocalBash(nil)} {
		req = &pb.OpenRequest{}
		p.setOn(req)
		if c := req.GetLocalBash(); c == nil || proto.Size(c) != 0 {
			t.Fatalf("LocalBash without caps sets %v", req.GetProvider())
		}
	}

	var d DescribeResponse
	in := cat(field(17, 0, varint(524289)), field(18, 0, varint(524290)),
		field(15, 2, field(23, 2, []byte("runsc"))))
	if err := proto.Unmarshal(in, &d); err != nil || d.GetUid() != 524289 || d.GetGid() != 524290 ||
		d.GetContainer().GetRuntime() != "runsc" {
		t.Fatalf("DescribeResponse from %x = %v, %v", in, &d, err)
	}

	var p ProviderInfo
	in = cat(field(1, 2, []byte("docker")),
		field(7, 2, cat(field(1, 2, []byte("runc")), field(2, 0, varint(1)))),
		field(7, 2, cat(field(1, 2, []byte("runsc")), field(3, 2, []byte("not registered")))),
		field(8, 2, []byte("cgroup-v2")))
	if err := proto.Unmarshal(in, &p); err != nil || len(p.GetRuntimes()) != 2 || p.GetLimitsMechanism() != "cgroup-v2" {
		t.Fatalf("ProviderInfo from %x = %v, %v", in, &p, err)
	}
	if r := p.GetRuntimes(); r[0].GetName() != "runc" || !r[0].GetUsable() || r[0].GetReason() != "" ||
		r[1].GetName() != "runsc" || r[1].GetUsable() || r[1].GetReason() != "not registered" {
		t.Fatalf("runtimes = %v", r)
	}

	in = cat(field(2, 0, varint(1)), field(3, 2, []byte("entries_budget")))
	var l pb.ListDirResponse
	var g pb.GlobResponse
	if err := proto.Unmarshal(in, &l); err != nil || l.GetTruncatedReason() != "entries_budget" {
		t.Fatalf("ListDirResponse from %x = %v, %v", in, &l, err)
	}
	if err := proto.Unmarshal(in, &g); err != nil || g.GetTruncatedReason() != "entries_budget" {
		t.Fatalf("GlobResponse from %x = %v, %v", in, &g, err)
	}
	var s GrepSummary
	in = cat(field(5, 0, varint(1)), field(6, 2, []byte("time_budget")))
	if err := proto.Unmarshal(in, &s); err != nil || s.GetTruncatedReason() != "time_budget" {
		t.Fatalf("GrepSummary from %x = %v, %v", in, &s, err)
	}
}
