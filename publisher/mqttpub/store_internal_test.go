package mqttpub

import (
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/stretchr/testify/require"
)

// TestPacketStoreHandsOutCopies checks that what paho's resume changes in
// a packet it got from the store (the duplicate flag) is not the packet
// the store holds, which the writer of a lost connection may still read.
func TestPacketStoreHandsOutCopies(t *testing.T) {
	s := newPacketStore()
	s.Open()
	defer s.Close()
	pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	pub.Qos, pub.MessageID, pub.TopicName, pub.Payload = 1, 7, "t", []byte("x")
	s.Put("o.7", pub)
	pub.RemainingLength = 99 // the writer of the connection packs the packet it was given
	require.Zero(t, s.Get("o.7").(*packets.PublishPacket).RemainingLength, "a copy was stored")

	got := s.Get("o.7").(*packets.PublishPacket)
	require.NotSame(t, pub, got)
	require.Equal(t, pub.Payload, got.Payload)
	got.Dup = true
	require.False(t, s.Get("o.7").(*packets.PublishPacket).Dup)

	sub := packets.NewControlPacket(packets.Pubrel)
	s.Put("o.8", sub)
	require.Same(t, sub, s.Get("o.8"), "other packets as stored")
	require.Nil(t, s.Get("o.9"))
}
