package sodad

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/hostkeys"
	"github.com/soda-project/soda/internal/imagestore"
	"github.com/soda-project/soda/internal/llmgateway"
	"github.com/soda-project/soda/internal/profile"
	"github.com/soda-project/soda/internal/sandbox"
)

// startKeys starts what the profile's [Keys] give b's sandbox (the model
// gateway, the proxy's TLS terminator) and applies it to spec. The
// credentials are read now, from root's files, so that a rotated one is
// used by the next sandbox; the caller never sees a value, only the
// names (the Keys property).
func (d *Daemon) startKeys(b *box, p *profile.Profile, spec *sandbox.Spec) error {
	if p == nil || p.Keys.Empty() {
		return nil
	}
	if spec.NoNetwork {
		return errorf(errInvalidSpec, "profile %s gives its sandboxes keys ([Keys]), which need the network: NoNetwork cannot be asked for", p.Name)
	}
	c, err := keysConfig(p)
	if err != nil {
		d.log.Error("profile keys", "profile", p.Name, "err", err)
		return fmt.Errorf("profile %s: %w", p.Name, err)
	}
	if d.llm != nil {
		c.Metrics = d.llm
	}
	k, err := hostkeys.Start(c, d.log)
	if err != nil {
		return fmt.Errorf("profile %s: %w", p.Name, err)
	}
	if err := k.Apply(spec); err != nil {
		k.Close()
		var ng *hostkeys.NotGrantedError
		if errors.As(err, &ng) {
			return errorf(errInvalidSpec, "profile %s: %s has a secret or HTTP rule, so the request must grant it (Allow)", p.Name, ng.Target)
		}
		return fmt.Errorf("profile %s: %w", p.Name, err)
	}
	b.keys = k
	return nil
}

// startImage gives b's sandbox the profile's Image= as its system: the
// image must be in the store (an administrator pulls it), and it is leased
// while the sandbox runs. Like keys, the lease is this sodad's: a restart
// ends the sandbox.
func (d *Daemon) startImage(ctx context.Context, b *box, p *profile.Profile, spec *sandbox.Spec) error {
	if p == nil || p.Image == "" {
		return nil
	}
	dir := d.cfg.ImageStore
	if dir == "" {
		var err error
		if dir, err = imagestore.DefaultDir(os.Geteuid(), os.Getenv); err != nil {
			return fmt.Errorf("profile %s: Image=: %w", p.Name, err)
		}
	}
	s, err := imagestore.Open(ctx, dir, imagestore.Options{})
	if err != nil {
		return fmt.Errorf("profile %s: Image=%s: %w", p.Name, p.Image, err)
	}
	im, root, release, err := s.Use(ctx, p.Image)
	if err != nil {
		d.log.Error("profile image", "profile", p.Name, "image", p.Image, "err", err)
		return fmt.Errorf("profile %s: Image=%s: %w (an administrator puts it there: sodactl image pull %s)", p.Name, p.Image, err, p.Image)
	}
	spec.UseImage(root, p.Image, sandbox.ImageConfig{Env: im.Env, WorkingDir: im.WorkingDir})
	b.image, b.releaseImage = p.Image, release
	return nil
}

// keysConfig reads p's [Keys] and its credentials into hostkeys' terms.
func keysConfig(p *profile.Profile) (hostkeys.Config, error) {
	k := &p.Keys
	var c hostkeys.Config
	cred := func(id string) (string, error) {
		path, _ := k.CredentialPath(id) // Parse checked that it is there
		v, err := hostkeys.ReadCredential(path, true)
		if err != nil {
			return "", fmt.Errorf("credential %s: %w", id, err)
		}
		return v, nil
	}
	for _, l := range k.LLM {
		name, up, _ := strings.Cut(l, "=")
		prov, err := llmgateway.Lookup(name)
		if err != nil {
			return c, err
		}
		r := llmgateway.Route{Provider: prov}
		if up != "" {
			if r.Upstream, err = llmgateway.ParseUpstream(up); err != nil {
				return c, err
			}
		}
		if r.Key, err = cred(prov.KeyEnv); err != nil {
			return c, err
		}
		c.LLM = append(c.LLM, r)
	}
	c.Budget = k.LLMBudget
	for _, s := range k.Secrets {
		name, hosts, _ := strings.Cut(s, "@")
		sec, err := hostkeys.NewSecret(name, hosts)
		if err != nil {
			return c, err
		}
		if sec.Value, err = cred(name); err != nil {
			return c, err
		}
		c.Secrets = append(c.Secrets, sec)
	}
	c.Rules = append([]egress.HTTPRule(nil), k.Rules...)
	if len(k.UpstreamCA) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		for _, f := range k.UpstreamCA {
			pem, err := os.ReadFile(f)
			if err != nil {
				return c, fmt.Errorf("UpstreamCA: %w", err)
			}
			if !pool.AppendCertsFromPEM(pem) {
				return c, fmt.Errorf("UpstreamCA %s: no PEM certificate in it", f)
			}
		}
		c.RootCAs = pool
	}
	return c, nil
}
