package stream

import (
	"errors"
	"fmt"
)

// Identity is what makes a registry this agent's across a handover to a
// new binary: the instance id clients compare, and every stream id
// prefix with the last id it gave, so the new agent never gives an id
// twice.
type Identity struct {
	ID       string   `json:"id"`
	Prefixes []uint64 `json:"prefixes"`
	LastIDs  []uint64 `json:"last_ids"`
	NextID   uint64   `json:"next_id"`
}

// Identity is the registry's identity, for a handover.
func (r *Registry) Identity() Identity {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Identity{ID: r.instance.ID, Prefixes: append([]uint64(nil), r.prefixes...),
		LastIDs: append([]uint64(nil), r.lastIDs...), NextID: r.nextID}
}

// AdoptIdentity makes a registry that holds no stream yet the one id
// describes (the agent that handed over).
func (r *Registry) AdoptIdentity(id Identity) error {
	n := len(id.Prefixes)
	if id.ID == "" || n == 0 || len(id.LastIDs) != n || !owns(id.Prefixes[n-1], id.NextID) && id.NextID != id.Prefixes[n-1]<<idBits {
		return fmt.Errorf("stream identity %+v is not one a registry had", id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.streams) > 0 {
		return errors.New("stream identity: the registry already holds streams")
	}
	r.instance = Instance{ID: id.ID, prefix: id.Prefixes[n-1]}
	r.prefixes, r.lastIDs, r.nextID = append([]uint64(nil), id.Prefixes...), append([]uint64(nil), id.LastIDs...), id.NextID
	return nil
}
