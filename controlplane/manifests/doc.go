// Package manifests serves Kubernetes objects read from a directory of YAML
// files through a kubernetes.Interface, so the controller runs unchanged with
// no cluster: the quickstart's `--manifests DIR`.
//
// In: *.yaml / *.yml / *.json files (multi-document YAML allowed) holding
// Ingress, IngressClass, Service, EndpointSlice, Secret, ConfigMap and
// Namespace objects; documents of other kinds (the Deployment most examples
// put beside their Service and Ingress, custom resources) are skipped, each
// kind reported once. Out: a client-go clientset backed by an in-memory object
// tracker whose watches fire when the files change (fsnotify). A file that
// does not parse is reported and skipped; the objects it held before keep
// their last good state, and every other file keeps serving.
package manifests
