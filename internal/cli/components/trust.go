package components

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/spf13/pflag"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/trust"
)

// A standalone component's place in the trust graph (internal/trust): it
// is given the keys of the platform components its declaration admits,
// each as the role it is, and of the operators; the racks' workers and the
// jobs' agents it learns by following the ork (or, for a rack worker, as
// it issues them). The flags follow from the declaration: for each
// configured role a component admits, either a flag it dials that peer by
// (--ork KEY@HOST:PORT, --directory …) or an admit-only --ROLE-key KEY.

// peerKeyFlags are the keys of the components a component admits without
// dialling them, by role (--app-node-key, --monitor-key, …).
type peerKeyFlags struct {
	OrkKeys            []string `json:"orkKeys,omitempty"`
	AppNodeKeys        []string `json:"appNodeKeys,omitempty"`
	MonitorKeys        []string `json:"monitorKeys,omitempty"`
	DirectoryKeys      []string `json:"directoryKeys,omitempty"`
	ProxyInferenceKeys []string `json:"proxyInferenceKeys,omitempty"`
}

// roleFlag names a configured role in flags.
var roleFlag = map[trust.Role]string{
	trust.Ork:       "ork",
	trust.AppNode:   "app-node",
	trust.Monitor:   "monitor",
	trust.Directory: "directory",
	trust.Proxy:     "proxy-inference",
}

func (p *peerKeyFlags) slot(r trust.Role) *[]string {
	switch r {
	case trust.Ork:
		return &p.OrkKeys
	case trust.AppNode:
		return &p.AppNodeKeys
	case trust.Monitor:
		return &p.MonitorKeys
	case trust.Directory:
		return &p.DirectoryKeys
	case trust.Proxy:
		return &p.ProxyInferenceKeys
	}
	panic(fmt.Sprintf("cli: no key flag for role %s", r))
}

// bindTrust adds the flags of role's place in the graph: --operator, and a
// --ROLE-key flag for each configured role role admits that is not among
// dialled (those the command takes as KEY@HOST:PORT flags of its own).
func (c *componentFlags) bindTrust(f *pflag.FlagSet, role trust.Role, dialled ...trust.Role) {
	c.role, c.dialled = role, dialled
	f.StringSliceVar(&c.Operators, "operator", nil, "an operator's `KEY`: may call every method, as cosmicac rpc does (repeatable)")
	for _, r := range trust.ConfiguredPeers(role) {
		if slices.Contains(dialled, r) {
			continue
		}
		f.StringSliceVar(c.peerKeyFlags.slot(r), roleFlag[r]+"-key", nil, fmt.Sprintf("the public key of a %s to admit (repeatable)", r))
	}
}

// keyring makes the component's keyring: the operators, the keys of the
// --ROLE-key flags, and dialled, the keys of the peers the command dials,
// by role.
func (c *componentFlags) keyring(dialled map[trust.Role][]fabric.PublicKey) (*trust.Keyring, error) {
	ring := trust.NewKeyring()
	add := func(flag string, role trust.Role, vals []string) error {
		for _, s := range vals {
			k, err := fabric.ParsePublicKey(s)
			if err != nil {
				return cli.UsageErrorf("--%s %q: %v", flag, s, err)
			}
			if err := ring.Add(role, k); err != nil {
				return cli.UsageErrorf("--%s: %v", flag, err)
			}
		}
		return nil
	}
	if err := add("operator", trust.Operator, c.Operators); err != nil {
		return nil, err
	}
	for _, r := range trust.ConfiguredPeers(c.role) {
		if err := add(roleFlag[r]+"-key", r, *c.peerKeyFlags.slot(r)); err != nil {
			return nil, err
		}
	}
	for role, keys := range dialled {
		if err := ring.Add(role, keys...); err != nil {
			return nil, cli.UsageErrorf("--%s: %v", roleFlag[role], err)
		}
	}
	return ring, nil
}

// trustNode starts the fabric node of component (its name in pings) with
// its identity (from its data dir) and the trust policy of its role over
// ring; keys ring revokes have their connections closed.
func (c *componentFlags) trustNode(component string, ring *trust.Keyring, log *slog.Logger, opts ...trust.PolicyOption) (_ *fabric.Node, err error) {
	if c.lock == nil { // else the caller locked it first (wrk-ork)
		if err := c.lockDataDir(component, log); err != nil { // held until the caller's unlock
			return nil, err
		}
		defer c.unlockIf(&err)
	}
	id, err := fabric.LoadOrCreateIdentity(c.DataDir)
	if err != nil {
		return nil, err
	}
	// An ork's node answers "starting" until the ork serves on it
	// (ork.Lead opens it): it listens before it loads its state.
	n, err := fabric.New(fabric.Config{Component: component, Identity: id, Listen: c.Listen, Policy: trust.NewPolicy(c.role, ring, opts...), Logger: log,
		Starting: c.role == trust.Ork})
	if err != nil {
		return nil, err
	}
	ring.OnRevoke(n.Revoke)
	c.lockAddr(n.Addr())
	return n, nil
}

// peers are the platform peers a component dials, from their flags
// (KEY@HOST:PORT each): their keys by role, for its keyring, and their
// addresses, for its node.
type peers struct {
	keys  map[trust.Role][]fabric.PublicKey
	addrs map[fabric.PublicKey][]string
}

// add parses the values of --flag, the peers of role, and returns their
// keys; no value adds none.
func (p *peers) add(flag string, role trust.Role, vals ...string) ([]fabric.PublicKey, error) {
	if p.keys == nil {
		p.keys, p.addrs = map[trust.Role][]fabric.PublicKey{}, map[fabric.PublicKey][]string{}
	}
	var keys []fabric.PublicKey
	for _, v := range vals {
		k, addrs, err := cli.ParsePeerFlag(flag, v)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
		p.keys[role] = append(p.keys[role], k)
		p.addrs[k] = append(p.addrs[k], addrs...)
	}
	return keys, nil
}

// given is v as a flag's values: none when it is "".
func given(v string) []string {
	if v == "" {
		return nil
	}
	return []string{v}
}

// one is add of a required flag's one value.
func (p *peers) one(flag string, role trust.Role, val string) (fabric.PublicKey, error) {
	keys, err := p.add(flag, role, val)
	if err != nil {
		return fabric.PublicKey{}, err
	}
	return keys[0], nil
}

// dialNode is trustNode over the keyring of these peers (and the
// operators and --ROLE-key flags), which then knows their addresses.
func (c *componentFlags) dialNode(component string, p peers, log *slog.Logger, opts ...trust.PolicyOption) (*fabric.Node, *trust.Keyring, error) {
	ring, err := c.keyring(p.keys)
	if err != nil {
		return nil, nil, err
	}
	n, err := c.trustNode(component, ring, log, opts...)
	if err != nil {
		return nil, nil, err
	}
	for k, addrs := range p.addrs {
		n.AddAddrs(k, addrs...)
	}
	return n, ring, nil
}
