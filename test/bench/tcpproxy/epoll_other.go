//go:build !linux

package main

import (
	"context"
	"errors"
)

func serveEpollForward(context.Context, string) (string, error) {
	return "", errors.New("the epoll forwarder needs Linux")
}

func serveEpollRawForward(context.Context, string) (string, error) {
	return "", errors.New("the epoll forwarder needs Linux")
}
