package controlplane

import (
	"fmt"
	"strings"

	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
)

// listers reads the informer caches.
type listers struct {
	ingresses      networkinglisters.IngressLister
	ingressClasses networkinglisters.IngressClassLister
	services       corelisters.ServiceLister
	endpointSlices discoverylisters.EndpointSliceLister
	configMaps     corelisters.ConfigMapLister
	secrets        corelisters.SecretLister
}

// input snapshots the caches into a builder.Input. The ConfigMaps are
// "namespace/name" or empty; a missing ConfigMap reads as nil.
func (l listers) input(configMap, tcpServices, udpServices string) (builder.Input, error) {
	var in builder.Input
	var err error
	all := labels.Everything()
	if in.Ingresses, err = l.ingresses.List(all); err != nil {
		return in, fmt.Errorf("list ingresses: %w", err)
	}
	if in.IngressClasses, err = l.ingressClasses.List(all); err != nil {
		return in, fmt.Errorf("list ingressclasses: %w", err)
	}
	if in.Services, err = l.services.List(all); err != nil {
		return in, fmt.Errorf("list services: %w", err)
	}
	if in.EndpointSlices, err = l.endpointSlices.List(all); err != nil {
		return in, fmt.Errorf("list endpointslices: %w", err)
	}
	if in.Secrets, err = l.secrets.List(all); err != nil {
		return in, fmt.Errorf("list secrets: %w", err)
	}
	if in.ConfigMaps, err = l.configMaps.List(all); err != nil {
		return in, fmt.Errorf("list configmaps: %w", err)
	}
	if in.ConfigMap, err = l.configMap(configMap); err != nil {
		return in, err
	}
	if in.TCPServices, err = l.configMap(tcpServices); err != nil {
		return in, err
	}
	if in.UDPServices, err = l.configMap(udpServices); err != nil {
		return in, err
	}
	return in, nil
}

// slicesOf returns the cached EndpointSlices of one Service (none on a
// lister error, which the cache does not give).
func (l listers) slicesOf(namespace, service string) []*discoveryv1.EndpointSlice {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service})
	out, err := l.endpointSlices.EndpointSlices(namespace).List(sel)
	if err != nil {
		return nil
	}
	return out
}

// configMap reads "namespace/name" from the cache; empty or missing is nil.
func (l listers) configMap(key string) (*corev1.ConfigMap, error) {
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		return nil, nil
	}
	cm, err := l.configMaps.ConfigMaps(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get configmap %s: %w", key, err)
	}
	return cm, nil
}

func eventScheme() *runtime.Scheme { return scheme.Scheme }
