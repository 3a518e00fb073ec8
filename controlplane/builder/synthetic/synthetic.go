// Package synthetic generates builder inputs of a given size for
// benchmarks outside the builder (the controller's endpoint-change path,
// /metrics scrapes): n Ingresses, each with its own host and one Prefix
// path per Service, every Service with one EndpointSlice of ready
// endpoints. It is the shape test/k8s.Stage creates on a real API server
// (one Service and one endpoint per Ingress) when Services and Endpoints
// are 1.
package synthetic

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/switchyard-proxy/switchyard/controlplane/builder"
)

// Shape is what Input generates.
type Shape struct {
	// Ingresses is the number of Ingresses.
	Ingresses int
	// Services is the number of Services (and paths) per Ingress; zero
	// means 1.
	Services int
	// Endpoints is the number of ready endpoints per Service; zero means 1.
	Endpoints int
	// Namespaces spreads the Ingresses over that many namespaces; zero
	// means 100. test/k8s.Stage uses one.
	Namespaces int
}

// Class is the IngressClass every generated Ingress names; its controller
// is builder.DefaultControllerClass.
const Class = "switchyard"

// Input generates the objects of s. Ingress i lives in namespace
// "ns<i%Namespaces>", is named "ing<i>" with host "h<i>.example.com", and routes
// "/p<j>" to Service "svc<i>-<j>", whose slice "svc<i>-<j>-abcde" holds
// the endpoints Address(i, j, k).
func Input(s Shape) builder.Input {
	if s.Services <= 0 {
		s.Services = 1
	}
	if s.Endpoints <= 0 {
		s.Endpoints = 1
	}
	if s.Namespaces <= 0 {
		s.Namespaces = 100
	}
	class := Class
	in := builder.Input{IngressClasses: []*networkingv1.IngressClass{{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec:       networkingv1.IngressClassSpec{Controller: builder.DefaultControllerClass},
	}}}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pt := networkingv1.PathTypePrefix
	for i := range s.Ingresses {
		ns := fmt.Sprintf("ns%d", i%s.Namespaces)
		var paths []networkingv1.HTTPIngressPath
		for j := range s.Services {
			svc := Service(i, j)
			in.Services = append(in.Services, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc, ResourceVersion: "1"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
					Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080),
				}}},
			})
			addrs := make([]string, s.Endpoints)
			for k := range addrs {
				addrs[k] = Address(i, j, k)
			}
			in.EndpointSlices = append(in.EndpointSlices, Slice(ns, svc, addrs...))
			paths = append(paths, networkingv1.HTTPIngressPath{
				Path: fmt.Sprintf("/p%d", j), PathType: &pt,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
					Name: svc, Port: networkingv1.ServiceBackendPort{Name: "http"}}},
			})
		}
		in.Ingresses = append(in.Ingresses, &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("ing%d", i), ResourceVersion: "1",
				CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second)),
				Annotations: map[string]string{
					"nginx.ingress.kubernetes.io/proxy-body-size": "8m",
					"nginx.ingress.kubernetes.io/load-balance":    "ewma",
				}},
			Spec: networkingv1.IngressSpec{IngressClassName: &class, Rules: []networkingv1.IngressRule{{
				Host: fmt.Sprintf("h%d.example.com", i),
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: paths}},
			}}},
		})
	}
	return in
}

// Namespace is the namespace of Ingress i and its Services with the
// default Namespaces.
func Namespace(i int) string { return fmt.Sprintf("ns%d", i%100) }

// Service is the name of Ingress i's j-th Service.
func Service(i, j int) string { return fmt.Sprintf("svc%d-%d", i, j) }

// Address is the k-th endpoint of Ingress i's j-th Service.
func Address(i, j, k int) string {
	return fmt.Sprintf("10.%d.%d.%d", i/250%250, i%250, j*10+k+1)
}

// Slice is the EndpointSlice "<svc>-abcde" of Service ns/svc with one
// ready endpoint per address, port "http" 8080.
func Slice(ns, svc string, addrs ...string) *discoveryv1.EndpointSlice {
	ready := true
	name, port := "http", int32(8080)
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-abcde", ResourceVersion: "1",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}
	for _, a := range addrs {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		})
	}
	return es
}
