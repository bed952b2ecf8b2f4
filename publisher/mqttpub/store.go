package mqttpub

import (
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// packetStore is the client's store of packets in flight: paho's memory
// store, keeping and handing out copies of PUBLISH packets. On a reconnect,
// paho (v1.5.1, client.resume) sets the duplicate flag of every stored
// PUBLISH packet and sends it again, while the writer of the lost
// connection may still be writing the packet it was given (which sets its
// length fields): data races that the race detector reports in an outage
// under load. With copies, the packet stored is never one being written.
type packetStore struct{ *mqtt.MemoryStore }

func newPacketStore() packetStore { return packetStore{mqtt.NewMemoryStore()} }

// Put stores a copy of p under key.
func (s packetStore) Put(key string, p packets.ControlPacket) { s.MemoryStore.Put(key, copyPacket(p)) }

// Get returns a copy of the packet stored under key (nil when none is).
func (s packetStore) Get(key string) packets.ControlPacket { return copyPacket(s.MemoryStore.Get(key)) }

// copyPacket returns a copy of a PUBLISH packet, and any other packet as
// it is (paho does not change those after storing them).
func copyPacket(p packets.ControlPacket) packets.ControlPacket {
	if pub, ok := p.(*packets.PublishPacket); ok {
		c := *pub
		return &c
	}
	return p
}
