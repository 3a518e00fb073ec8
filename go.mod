module github.com/switchyard-proxy/switchyard

go 1.26.8
