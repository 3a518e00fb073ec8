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
	"k8s.io/client-go/tools/cache"
)

// listers reads the informer caches.
type listers struct {
	ingresses      networkinglisters.IngressLister
	ingressClasses networkinglisters.IngressClassLister
	services       corelisters.ServiceLister
	endpointSlices discoverylisters.EndpointSliceLister
	// slicesByService indexes the EndpointSlices by sliceServiceIndex.
	slicesByService cache.Indexer
	configMaps      corelisters.ConfigMapLister
	secrets         corelisters.SecretLister
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

// sliceServiceIndex indexes EndpointSlices by "namespace/service" (their
// kubernetes.io/service-name label): an endpoint change reads one
// Service's slices without listing its namespace's, which at 50k Services
// in one namespace cost more than the rest of the change.
const sliceServiceIndex = "service"

// sliceService is the sliceServiceIndex function.
func sliceService(obj any) ([]string, error) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	svc := es.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil, nil
	}
	return []string{es.Namespace + "/" + svc}, nil
}

// slicesOf returns the cached EndpointSlices of one Service (none on an
// index error, which the cache does not give).
func (l listers) slicesOf(namespace, service string) []*discoveryv1.EndpointSlice {
	objs, err := l.slicesByService.ByIndex(sliceServiceIndex, namespace+"/"+service)
	if err != nil {
		return nil
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if es, ok := o.(*discoveryv1.EndpointSlice); ok {
			out = append(out, es)
		}
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
