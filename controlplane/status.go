package controlplane

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// statusWriter writes Ingress status.loadBalancer while this controller
// holds the Lease. It runs beside the sync loop: the loop only signals it
// after a build, so status writes never delay or interleave with a build.
type statusWriter struct {
	// immutable
	c *Controller

	// atomic
	leader atomic.Bool

	kick chan struct{} // buffer 1: "the desired status may have changed"
}

func (s *statusWriter) signal() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// IsLeader reports whether this controller currently holds the Lease and
// therefore writes Ingress status. Without status publishing configured it
// is always false.
func (c *Controller) IsLeader() bool { return c.status != nil && c.status.leader.Load() }

// statusEnabled says whether the controller publishes Ingress status.
func (cfg Config) statusEnabled() bool {
	return cfg.PublishService != "" || cfg.PublishStatusAddress != ""
}

// runStatus campaigns for the Lease and, while leading, keeps Ingress status
// up to date. It returns when ctx ends.
func (s *statusWriter) run(ctx context.Context) {
	cfg := s.c.cfg
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.ElectionNamespace, Name: cfg.ElectionID},
		Client:     cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity, EventRecorder: s.c.recorder},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   cfg.LeaseDuration,
			RenewDeadline:   cfg.RenewDeadline,
			RetryPeriod:     cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            cfg.ElectionID,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: s.lead,
				OnStoppedLeading: func() {
					s.leader.Store(false)
					klog.InfoS("stopped leading", "lease", cfg.ElectionNamespace+"/"+cfg.ElectionID, "identity", cfg.Identity)
				},
			},
		})
		if err != nil {
			// New validated the durations; this is a programmer error.
			panic("BUG: leader election config: " + err.Error())
		}
		le.Run(ctx) // returns when leadership is lost or ctx ends; campaign again
	}
}

// lead runs while this controller holds the Lease.
func (s *statusWriter) lead(ctx context.Context) {
	s.leader.Store(true)
	klog.InfoS("started leading", "lease", s.c.cfg.ElectionNamespace+"/"+s.c.cfg.ElectionID, "identity", s.c.cfg.Identity)
	backoff := time.Duration(0)
	s.signal()
	for {
		var retry <-chan time.Time
		if backoff > 0 {
			retry = time.After(backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-retry:
		}
		if err := s.update(ctx); err != nil {
			backoff = min(max(2*backoff, 250*time.Millisecond), 30*time.Second)
			klog.ErrorS(err, "update ingress status; retrying", "in", backoff)
			continue
		}
		backoff = 0
	}
}

// update writes status.loadBalancer on every Ingress this controller serves
// whose status differs from the published addresses.
func (s *statusWriter) update(ctx context.Context) error {
	if !s.c.built.Load() {
		return nil // the first sync will signal again
	}
	want, err := s.addresses()
	if err != nil {
		return err
	}
	l := s.c.listers
	ings, err := l.ingresses.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list ingresses: %w", err)
	}
	classes, err := l.ingressClasses.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list ingressclasses: %w", err)
	}
	var errs []error
	for _, ing := range ings {
		if !builder.IsOurs(ing, classes, s.c.cfg.Build) || equality.Semantic.DeepEqual(ing.Status.LoadBalancer.Ingress, want) {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		up := ing.DeepCopy()
		up.Status.LoadBalancer.Ingress = want
		_, err := s.c.cfg.Client.NetworkingV1().Ingresses(ing.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{})
		switch {
		case apierrors.IsNotFound(err): // deleted meanwhile
		case err != nil:
			errs = append(errs, fmt.Errorf("update status of ingress %s/%s: %w", ing.Namespace, ing.Name, err))
		default:
			klog.V(2).InfoS("ingress status updated", "ingress", ing.Namespace+"/"+ing.Name, "addresses", want)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d ingress status updates failed, first: %w", len(errs), errs[0])
	}
	return nil
}

// addresses is the status to publish, as ingress-nginx's runningAddresses:
// --publish-status-address wins; else the --publish-service Service's
// addresses. Sorted, so comparisons are stable.
func (s *statusWriter) addresses() ([]networkingv1.IngressLoadBalancerIngress, error) {
	var out []networkingv1.IngressLoadBalancerIngress
	if list := s.c.cfg.PublishStatusAddress; list != "" {
		for _, a := range strings.Split(list, ",") {
			out = append(out, lbIngress(strings.TrimSpace(a)))
		}
	} else {
		ns, name, _ := strings.Cut(s.c.cfg.PublishService, "/")
		svc, err := s.c.listers.services.Services(ns).Get(name)
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("publish service %s: not found", s.c.cfg.PublishService)
		}
		if err != nil {
			return nil, fmt.Errorf("get publish service %s: %w", s.c.cfg.PublishService, err)
		}
		out = serviceAddresses(svc)
	}
	slices.SortFunc(out, func(a, b networkingv1.IngressLoadBalancerIngress) int {
		return cmp.Or(cmp.Compare(a.IP, b.IP), cmp.Compare(a.Hostname, b.Hostname))
	})
	return slices.CompactFunc(out, func(a, b networkingv1.IngressLoadBalancerIngress) bool {
		return a.IP == b.IP && a.Hostname == b.Hostname
	}), nil
}

// serviceAddresses are the addresses a Service is reached at, by type, as
// ingress-nginx's statusAddressFromService: ExternalName its name,
// ClusterIP its cluster IP, NodePort its external IPs (else the cluster IP),
// LoadBalancer its load-balancer ingress plus external IPs.
func serviceAddresses(svc *corev1.Service) []networkingv1.IngressLoadBalancerIngress {
	var out []networkingv1.IngressLoadBalancerIngress
	switch svc.Spec.Type {
	case corev1.ServiceTypeExternalName:
		out = append(out, networkingv1.IngressLoadBalancerIngress{Hostname: svc.Spec.ExternalName})
	case corev1.ServiceTypeNodePort:
		for _, ip := range svc.Spec.ExternalIPs {
			out = append(out, lbIngress(ip))
		}
		if len(out) == 0 && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			out = append(out, lbIngress(svc.Spec.ClusterIP))
		}
	case corev1.ServiceTypeLoadBalancer:
		for _, lb := range svc.Status.LoadBalancer.Ingress {
			if lb.IP != "" {
				out = append(out, networkingv1.IngressLoadBalancerIngress{IP: lb.IP})
			} else if lb.Hostname != "" {
				out = append(out, networkingv1.IngressLoadBalancerIngress{Hostname: lb.Hostname})
			}
		}
		for _, ip := range svc.Spec.ExternalIPs {
			out = append(out, lbIngress(ip))
		}
	default: // ClusterIP
		if svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			out = append(out, lbIngress(svc.Spec.ClusterIP))
		}
		for _, ip := range svc.Spec.ExternalIPs {
			out = append(out, lbIngress(ip))
		}
	}
	return out
}

// lbIngress is an IP entry for an IP address, else a hostname entry.
func lbIngress(a string) networkingv1.IngressLoadBalancerIngress {
	if net.ParseIP(a) != nil {
		return networkingv1.IngressLoadBalancerIngress{IP: a}
	}
	return networkingv1.IngressLoadBalancerIngress{Hostname: a}
}

// defaultIdentity is the hostname plus a random suffix, so two controllers
// in one process (tests) or on one host still differ.
func defaultIdentity() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "switchyard"
	}
	return h + "_" + rand.String(8)
}
