package workspaced

import (
	"context"

	pb "workspaced.dev/go/gen/workspace/v1"
)

// Version is this client's release, MAJOR.MINOR.PATCH: the VERSION file at
// the root of the source tree it comes from (a test keeps the two equal).
// The server reports its own with ServerVersion.
const Version = "0.1.0"

// ServerVersion returns the release of the server that answers, as
// `workspaced --version` prints it ("" from a server too old to say).
// Describe reports it too (DescribeResponse.Server).
func (c *Client) ServerVersion(ctx context.Context) (string, error) {
	r, err := c.providers.ListProviders(ctx, &pb.ListProvidersRequest{})
	if err != nil {
		return "", wrapErr(err)
	}
	return r.GetServer().GetVersion(), nil
}
