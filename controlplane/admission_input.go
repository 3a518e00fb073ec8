package controlplane

import (
	"errors"
	"fmt"

	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// admissionIndex indexes the Ingress cache on builder.HostPathKeys, so the
// validating admission webhook (controlplane/admission) finds the
// Ingresses sharing a host and path with the one under review without
// scanning the store (issue 21, item 3).
const admissionIndex = "switchyard.dev/host-path"

// EnableAdmission adds the index AdmissionInput needs to the Ingress
// cache. Call it before Run.
func (c *Controller) EnableAdmission() error {
	err := c.factory.Networking().V1().Ingresses().Informer().AddIndexers(cache.Indexers{
		admissionIndex: func(obj any) ([]string, error) {
			ing, ok := obj.(*networkingv1.Ingress)
			if !ok {
				return nil, nil
			}
			return builder.HostPathKeys(ing), nil
		},
	})
	if err != nil {
		return fmt.Errorf("controlplane: index Ingresses for admission: %w", err)
	}
	return nil
}

// AdmissionInput snapshots, from the informer caches a sync reads, what
// builder.ReviewIngress needs to review candidate: the Ingresses sharing a
// host and path with it, every IngressClass, the Services, Secrets and
// ConfigMaps of their namespaces (an annotation names only its own
// namespace's), and the controller ConfigMap. EndpointSlices are
// left out: they never make an error on an Ingress. It reads only what the
// controller already watches, so the webhook needs no RBAC of its own.
// Before Ready the caches may be incomplete; without EnableAdmission it
// fails.
func (c *Controller) AdmissionInput(candidate *networkingv1.Ingress) (builder.Input, error) {
	var in builder.Input
	var err error
	idx := c.factory.Networking().V1().Ingresses().Informer().GetIndexer()
	seen := map[string]bool{}
	namespaces := map[string]bool{candidate.Namespace: true}
	for _, key := range builder.HostPathKeys(candidate) {
		objs, err := idx.ByIndex(admissionIndex, key)
		if err != nil {
			return in, fmt.Errorf("look up Ingresses by host and path: %w", err)
		}
		for _, o := range objs {
			ing, ok := o.(*networkingv1.Ingress)
			if !ok {
				return in, errors.New("look up Ingresses by host and path: not an Ingress in the cache")
			}
			if k := ing.Namespace + "/" + ing.Name; !seen[k] {
				seen[k] = true
				in.Ingresses = append(in.Ingresses, ing)
				namespaces[ing.Namespace] = true
			}
		}
	}
	all := labels.Everything()
	l := c.listers
	if in.IngressClasses, err = l.ingressClasses.List(all); err != nil {
		return in, fmt.Errorf("list ingressclasses: %w", err)
	}
	for ns := range namespaces {
		svcs, err := l.services.Services(ns).List(all)
		if err != nil {
			return in, fmt.Errorf("list services: %w", err)
		}
		in.Services = append(in.Services, svcs...)
		secrets, err := l.secrets.Secrets(ns).List(all)
		if err != nil {
			return in, fmt.Errorf("list secrets: %w", err)
		}
		in.Secrets = append(in.Secrets, secrets...)
		cms, err := l.configMaps.ConfigMaps(ns).List(all)
		if err != nil {
			return in, fmt.Errorf("list configmaps: %w", err)
		}
		in.ConfigMaps = append(in.ConfigMaps, cms...)
	}
	if in.ConfigMap, err = l.configMap(c.cfg.ConfigMap); err != nil {
		return in, err
	}
	return in, nil
}

// BuildOptions are the builder options every sync uses.
func (c *Controller) BuildOptions() builder.Options { return c.cfg.Build }
