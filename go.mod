module github.com/switchyard-proxy/switchyard

go 1.26.8

require (
	github.com/andybalholm/brotli v1.2.2 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/molecule-man/go-brrr v1.0.1 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasthttp v1.74.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	k8s.io/api v0.33.13 // indirect
	k8s.io/apimachinery v0.33.13 // indirect
	k8s.io/client-go v0.33.13 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
