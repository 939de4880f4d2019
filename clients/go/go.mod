// The Go client of workspaced. The require lines name the versions the
// module is built and tested with: the ones Debian 12 packages
// (golang-google-grpc-dev, golang-google-genproto-dev,
// golang-github-golang-protobuf-1-3-dev, golang-golang-x-{net,sys,text}-dev).
// vendor.sh assembles vendor/ from those packages and refuses a version
// that differs from this list.
module workspaced.dev/go

go 1.19

require (
	github.com/golang/protobuf v1.3.5
	google.golang.org/genproto v0.0.0-20200413115906-b5235f65be36
	google.golang.org/grpc v1.33.3
)

require (
	golang.org/x/net v0.7.0 // indirect
	golang.org/x/sys v0.3.0 // indirect
	golang.org/x/text v0.7.0 // indirect
)
