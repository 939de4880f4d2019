// Package workspace_v1 holds the Go stubs generated from the API protos
// (proto/workspace/v1 at the root of the repository): the messages, enums
// (ErrorReason among them) and gRPC clients the workspaced package wraps.
//
// The stubs are not committed. Generate them before building the module:
//
//	go generate ./gen/...
//
// which runs protoc with protoc-gen-go and protoc-gen-go-grpc (Debian:
// protobuf-compiler, protoc-gen-go-1-3, protoc-gen-go-grpc) over the protos
// of this source tree and writes *.pb.go beside this file. The protos'
// go_package places them in this package. google.rpc and grpc.health are
// not generated: grpc-go and genproto already carry them, and generating
// them again would register the same message names twice.
package workspace_v1

//go:generate protoc -I../../../../../proto --go_out=paths=source_relative:../.. --go-grpc_out=paths=source_relative:../.. workspace/v1/common.proto workspace/v1/providers.proto workspace/v1/workspaces.proto workspace/v1/filesystem.proto workspace/v1/exec.proto
