// Package basicauth reads the credentials of ingress-nginx's auth-type:
// basic (an htpasswd file, or an auth-map Secret of user → hash) into
// Credentials, which the Go data plane checks a user and password against as
// nginx's auth_basic_user_file does, and which the nginx data plane writes
// back as a file of validated lines only.
//
// Schemes: nginx checks {PLAIN}, {SHA} and {SSHA} itself and hands every
// other hash to crypt(3); on Debian bookworm that is libxcrypt, which takes
// $1$ (MD5-crypt), $5$ and $6$ (SHA-crypt, rounds= included), bcrypt
// ($2a$, $2b$, $2y$) and also yescrypt ($y$) and DES; nginx itself adds
// Apache's $apr1$. Credentials accept all of these but yescrypt and DES,
// whose lines are refused: the Ingress then fails closed rather than let
// the two data planes answer differently. The hash implementations are
// github.com/tg123/go-htpasswd's (with golang.org/x/crypto's bcrypt).
//
// Flows in: file bytes. Flows out: Credentials, errors that name a line
// number but never a hash.
package basicauth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	htpasswd "github.com/tg123/go-htpasswd"
)

// Credentials are users and their password hashes. Immutable; safe for
// concurrent use. The zero value accepts nobody.
type Credentials struct {
	users map[string]htpasswd.EncodedPasswd
	// file is the canonical file: "user:hash\n" per user, first entry of
	// each user, in the order read.
	file   []byte
	digest string
}

// schemes are the hash parsers of the schemes accepted, in the order tried.
var schemes = []htpasswd.PasswdParser{htpasswd.AcceptBcrypt, htpasswd.AcceptMd5, htpasswd.AcceptCryptSha,
	htpasswd.AcceptSsha, htpasswd.AcceptSha, acceptPlain}

// plain is nginx's {PLAIN} scheme.
type plain string

func (p plain) MatchesPassword(pw string) bool {
	return subtle.ConstantTimeCompare([]byte(p), []byte(pw)) == 1
}

func acceptPlain(src string) (htpasswd.EncodedPasswd, error) {
	if s, ok := strings.CutPrefix(src, "{PLAIN}"); ok {
		return plain(s), nil
	}
	return nil, nil
}

// Parse reads an htpasswd file: "user:hash" lines; blank lines and lines
// starting with '#' are skipped, as nginx skips them. Every other line must
// hold a user name and a hash of an accepted scheme, or the file is refused
// with an error naming the line. For a user listed twice the first line
// counts, as nginx reads the file top down.
func Parse(data []byte) (*Credentials, error) {
	b := &builder{c: &Credentials{users: map[string]htpasswd.EncodedPasswd{}}}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: no ':' between user and password hash", i+1)
		}
		if err := b.add(user, hash); err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
	}
	return b.done()
}

// ParseMap reads an auth-map Secret: each key a user, its value the hash.
// Users are taken in name order.
func ParseMap(m map[string][]byte) (*Credentials, error) {
	users := make([]string, 0, len(m))
	for u := range m {
		users = append(users, u)
	}
	sort.Strings(users)
	b := &builder{c: &Credentials{users: map[string]htpasswd.EncodedPasswd{}}}
	for _, u := range users {
		if err := b.add(u, strings.TrimRight(string(m[u]), "\r\n")); err != nil {
			return nil, fmt.Errorf("key %q: %w", u, err)
		}
	}
	return b.done()
}

type builder struct {
	c    *Credentials
	file bytes.Buffer
}

func (b *builder) add(user, hash string) error {
	if user == "" || strings.ContainsAny(user, ":") || strings.ContainsFunc(user, isControl) {
		return fmt.Errorf("user name empty or holding ':' or control characters")
	}
	if hash == "" || strings.ContainsFunc(hash, isControl) || strings.ContainsAny(hash, ": ") {
		return fmt.Errorf("password hash of user %q is empty or holds ':', blanks or control characters", user)
	}
	if _, dup := b.c.users[user]; dup {
		return nil // the first line counts
	}
	for _, accept := range schemes {
		p, err := accept(hash)
		if err != nil {
			return fmt.Errorf("password hash of user %q is malformed", user)
		}
		if p != nil {
			b.c.users[user] = p
			b.file.WriteString(user)
			b.file.WriteByte(':')
			b.file.WriteString(hash)
			b.file.WriteByte('\n')
			return nil
		}
	}
	return fmt.Errorf("password hash of user %q is of a scheme not supported (supported: $apr1$, $1$, $5$, $6$, bcrypt, {SHA}, {SSHA}, {PLAIN})", user)
}

func (b *builder) done() (*Credentials, error) {
	if len(b.c.users) == 0 {
		return nil, fmt.Errorf("no user")
	}
	b.c.file = b.file.Bytes()
	sum := sha256.Sum256(b.c.file)
	b.c.digest = hex.EncodeToString(sum[:])
	return b.c, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// Verify reports whether password is user's, as nginx's auth_basic answers.
func (c *Credentials) Verify(user, password string) bool {
	if c == nil {
		return false
	}
	p, ok := c.users[user]
	return ok && p.MatchesPassword(password)
}

// File is the canonical htpasswd file: one validated "user:hash" line per
// user. The caller must not modify it.
func (c *Credentials) File() []byte { return c.file }

// Digest is the hex SHA-256 of File: it changes when the credentials do.
func (c *Credentials) Digest() string { return c.digest }

// Users is how many users there are.
func (c *Credentials) Users() int { return len(c.users) }

// MarshalJSON shows the number of users and the digest, never the hashes,
// so debug output and configuration hashing see changes without exposing
// them.
func (c *Credentials) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Users  int    `json:"users"`
		SHA256 string `json:"sha256"`
	}{len(c.users), c.digest})
}

// UnmarshalJSON reads what MarshalJSON wrote: credentials that accept
// nobody (the hashes are never in JSON) but keep the digest, by which a
// reader that has the File from elsewhere finds and checks them.
func (c *Credentials) UnmarshalJSON(b []byte) error {
	var v struct {
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*c = Credentials{digest: v.SHA256}
	return nil
}
