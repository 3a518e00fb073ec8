package k8s

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// RepoRoot is the checkout's root directory (found from this source file).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// RBACFile is the manifest whose ClusterRoles and Roles the controller
// identity gets.
func RBACFile() string { return filepath.Join(RepoRoot(), "deploy", "base", "rbac.yaml") }

// controllerRBAC is the controller's part of rbac.yaml.
type controllerRBAC struct {
	clusterRoles []rbacv1.ClusterRole
	roles        []rbacv1.Role
}

// loadControllerRBAC reads every ClusterRole and Role in RBACFile.
func loadControllerRBAC() (*controllerRBAC, error) {
	data, err := os.ReadFile(RBACFile())
	if err != nil {
		return nil, fmt.Errorf("read the controller's RBAC: %w", err)
	}
	var r controllerRBAC
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("split %s: %w", RBACFile(), err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("decode %s: %w", RBACFile(), err)
		}
		switch meta.Kind {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			if err := yaml.UnmarshalStrict(doc, &cr); err != nil {
				return nil, fmt.Errorf("decode ClusterRole in %s: %w", RBACFile(), err)
			}
			r.clusterRoles = append(r.clusterRoles, cr)
		case "Role":
			var role rbacv1.Role
			if err := yaml.UnmarshalStrict(doc, &role); err != nil {
				return nil, fmt.Errorf("decode Role in %s: %w", RBACFile(), err)
			}
			r.roles = append(r.roles, role)
		}
	}
	if len(r.clusterRoles) == 0 {
		return nil, fmt.Errorf("no ClusterRole in %s", RBACFile())
	}
	return &r, nil
}

// applyControllerRBAC creates the ClusterRoles and Roles of rbac.yaml (the
// Roles in their own namespace) and binds them all to ControllerUser.
func (c *Cluster) applyControllerRBAC(ctx context.Context) error {
	r, err := loadControllerRBAC()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return err
	}
	for _, cr := range r.clusterRoles {
		cr := cr
		cr.ResourceVersion = ""
		// Existing ones are kept: a cluster on a kept data directory
		// (Options.DataDir) has them from an earlier start.
		if _, err := client.RbacV1().ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ClusterRole %s: %w", cr.Name, err)
		}
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: cr.Name + "-e2e"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: ControllerUser}},
		}
		if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("bind ClusterRole %s: %w", cr.Name, err)
		}
	}
	for _, role := range r.roles {
		if err := c.createNamespace(ctx, role.Namespace); err != nil {
			return err
		}
		if err := bindRoles(ctx, client, role.Namespace, []rbacv1.Role{role}); err != nil {
			return err
		}
	}
	return nil
}

// BindController copies the Roles of rbac.yaml into namespace ns and binds
// them to ControllerUser, as if the controller ran there (its Lease, for
// one). Namespace does this already.
func (c *Cluster) BindController(t testing.TB, ns string) {
	t.Helper()
	r, err := loadControllerRBAC()
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := bindRoles(context.Background(), client, ns, r.roles); err != nil {
		t.Fatal(err)
	}
}

// bindRoles creates each Role in ns and a RoleBinding of it to
// ControllerUser; existing ones are kept.
func bindRoles(ctx context.Context, client kubernetes.Interface, ns string, roles []rbacv1.Role) error {
	for _, role := range roles {
		role := role
		role.Namespace, role.ResourceVersion = ns, ""
		if _, err := client.RbacV1().Roles(ns).Create(ctx, &role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Role %s/%s: %w", ns, role.Name, err)
		}
		b := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-e2e", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: ControllerUser}},
		}
		if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("bind Role %s/%s: %w", ns, role.Name, err)
		}
	}
	return nil
}

// createNamespace creates ns as admin; an existing one is fine.
func (c *Cluster) createNamespace(ctx context.Context, ns string) error {
	client, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}
