module github.com/softverbs/softverbs

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	github.com/google/gopacket v1.1.19
	github.com/spf13/pflag v1.1.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.49.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.48.0 // indirect
)
