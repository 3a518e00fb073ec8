package model

import (
	"reflect"
	"strings"
	"testing"
)

// TestBackendEqualCoversEveryField: changing any one field, at any depth
// (pointed-to values, slice and map elements), makes Equal false, so a field
// added to Backend cannot be forgotten by Equal (the balancer would then
// keep serving a backend's previous version).
func TestBackendEqualCoversEveryField(t *testing.T) {
	i64 := func(n int64) *int64 { return &n }
	base := func() Backend {
		return Backend{
			Name: "b", Port: ServicePort{Number: 80, Name: "http"}, HasService: true, ExternalName: "x.example",
			Endpoints: []Endpoint{{Address: "10.0.0.1", Port: 80}}, Algorithm: EWMA,
			HashBy: &HashBy{Key: "$request_uri", Subset: true, SubsetSize: 3},
			Affinity: &CookieAffinity{Persistent: true, Name: "c", Expires: i64(1), MaxAge: i64(2), Path: "/", Domain: "d", SameSite: "Lax",
				ConditionalSameSiteNone: true, Secure: true, ChangeOnFailure: true, Locations: map[string][]string{"h": {"/"}}},
			Canary:       Canary{Weight: 1, WeightTotal: 100, Header: "X", HeaderValue: "v", HeaderPattern: NewRegexp("a"), Cookie: "k"},
			Alternatives: []string{"alt"}, NoServer: true, SSLPassthrough: true,
		}
	}
	a, b := base(), base()
	if !a.Equal(&b) {
		t.Fatal("two equal backends are not Equal")
	}
	n := 0
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.Type() == reflect.TypeOf(&Regexp{}) {
				mutate(t, path, base, func(x *Backend) { x.Canary.HeaderPattern = NewRegexp("b") })
				n++
				return
			}
			walk(path, v.Elem())
		case reflect.Struct:
			for i := range v.NumField() {
				walk(path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		default:
			n++
			mutate(t, path, base, func(x *Backend) { change(reflect.ValueOf(x).Elem(), path) })
		}
	}
	walk("", reflect.ValueOf(&a).Elem())
	if n < 30 {
		t.Fatalf("walked %d fields; the walk is broken", n)
	}
	// A nil pointer against a set one.
	for _, f := range []func(*Backend){
		func(x *Backend) { x.HashBy = nil }, func(x *Backend) { x.Affinity = nil },
		func(x *Backend) { x.Affinity.Expires = nil }, func(x *Backend) { x.Canary.HeaderPattern = nil },
	} {
		x, y := base(), base()
		f(&y)
		if x.Equal(&y) || y.Equal(&x) {
			t.Errorf("a nil pointer compares Equal to a set one: %+v", y)
		}
	}
}

func mutate(t *testing.T, path string, base func() Backend, f func(*Backend)) {
	t.Helper()
	x, y := base(), base()
	f(&y)
	if x.Equal(&y) {
		t.Errorf("changing %s leaves the backends Equal", path)
	}
}

// change sets the field at path (".A.B", through pointers; slices and maps
// by their first element) to a different value.
func change(v reflect.Value, path string) {
	for _, name := range splitPath(path) {
		for v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		v = v.FieldByName(name)
	}
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint16:
		v.SetUint(v.Uint() + 1)
	case reflect.Slice:
		e := v.Index(0)
		if e.Kind() == reflect.String {
			e.SetString(e.String() + "x")
		} else {
			e.Field(0).SetString(e.Field(0).String() + "x")
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			v.SetMapIndex(k, reflect.ValueOf([]string{"/other"}))
		}
	default:
		panic("change: unhandled kind " + v.Kind().String() + " at " + path)
	}
}

func splitPath(p string) []string { return strings.Split(strings.TrimPrefix(p, "."), ".") }
