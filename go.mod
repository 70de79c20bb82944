module github.com/soda-project/soda

go 1.26.0

require (
	github.com/containerd/cgroups/v3 v3.1.3 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/moby/sys/userns v0.1.0 // indirect
	github.com/modelcontextprotocol/go-sdk v1.8.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
