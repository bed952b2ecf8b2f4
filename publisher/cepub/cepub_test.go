package cepub_test

import (
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/publisher/cepub"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func message(contentType string, payload []byte) *outbox.Message {
	return &outbox.Message{
		MessageID: "id-1", AggregateType: "order", AggregateID: "ord-1", EventType: "ORDER_PAID",
		PartitionKey: "pk-1", ContentType: contentType, Payload: payload,
		Headers:   map[string]string{outbox.HeaderTraceparent: traceparent, "x-tenant": "acme"},
		CreatedAt: time.Date(2025, 5, 6, 5, 8, 9, 123456789, time.FixedZone("X", 3600)),
	}
}

func TestBinary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		binding cepub.Binding
		prefix  string
	}{
		{cepub.HTTP, "ce-"}, {cepub.Kafka, "ce_"}, {cepub.AMQP, "cloudEvents:"}, {cepub.NATS, "ce-"},
	} {
		t.Run(tc.binding.String(), func(t *testing.T) {
			t.Parallel()
			inner := outboxtest.NewPublisher()
			p, err := cepub.New(inner, tc.binding, "/outbox/test")
			require.NoError(t, err)
			m := message("application/x-protobuf", []byte{0x08, 0x96, 0x01, 0xff})
			before := *m
			require.NoError(t, p.Publish(t.Context(), []*outbox.Message{m})[0])
			require.Equal(t, before, *m, "the message itself is not changed")

			sent := inner.Messages()[0]
			require.Equal(t, m.Payload, sent.Payload, "binary mode keeps the payload")
			require.Equal(t, m.ContentType, sent.ContentType)
			want := map[string]string{
				"specversion": "1.0", "id": "id-1", "source": "/outbox/test", "type": "ORDER_PAID",
				"subject": "ord-1", "time": "2025-05-06T04:08:09.123456789Z", "aggregatetype": "order",
				"partitionkey": "pk-1", "traceparent": traceparent,
			}
			for name, v := range want {
				require.Equal(t, v, sent.Headers[tc.prefix+name], "attribute %s", name)
			}
			require.NotContains(t, sent.Headers, tc.prefix+"tracestate", "no trace state, no attribute")
			require.Equal(t, "acme", sent.Headers["x-tenant"], "the message's own headers stay")
			if tc.binding == cepub.NATS {
				require.Equal(t, m.ContentType, sent.Headers["content-type"])
			}
		})
	}
}

func TestStructured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		binding     cepub.Binding
		contentType string
		payload     []byte
	}{
		{"JSONOnKafka", cepub.Kafka, "", []byte(`{"a": "<&>"}`)},
		{"ProtobufOnMQTT", cepub.MQTT, "application/x-protobuf", []byte{0x00, 0xff, 0xfe}},
		{"TextOnRedis", cepub.None, "text/plain", []byte(`42`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inner := outboxtest.NewPublisher()
			p, err := cepub.New(inner, tc.binding, "/outbox/test", cepub.WithMode(cepub.Structured))
			require.NoError(t, err)
			m := message(tc.contentType, tc.payload)
			require.NoError(t, p.Publish(t.Context(), []*outbox.Message{m})[0])

			sent := inner.Messages()[0]
			require.Equal(t, cepub.ContentTypeStructured, sent.ContentType)
			var ev map[string]any
			require.NoError(t, json.Unmarshal(sent.Payload, &ev))
			require.Equal(t, "1.0", ev["specversion"])
			require.Equal(t, "id-1", ev["id"])
			require.Equal(t, "ORDER_PAID", ev["type"])
			require.Equal(t, "ord-1", ev["subject"])
			require.Equal(t, m.MediaType(), ev["datacontenttype"])
			if m.JSONPayload() {
				require.Contains(t, string(sent.Payload), `"data":`+string(tc.payload), "JSON data byte for byte")
				require.NotContains(t, ev, "data_base64")
			} else {
				got, err := base64.StdEncoding.DecodeString(ev["data_base64"].(string))
				require.NoError(t, err)
				require.Equal(t, tc.payload, got)
				require.NotContains(t, ev, "data")
			}
		})
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	inner := outboxtest.NewPublisher()
	for _, tc := range []struct {
		name    string
		binding cepub.Binding
		source  string
		opts    []cepub.Option
		want    string
	}{
		{"BinaryOnMQTT", cepub.MQTT, "/s", []cepub.Option{cepub.WithMode(cepub.Binary)}, "no binary mode"},
		{"BinaryWithoutBinding", cepub.None, "/s", []cepub.Option{cepub.WithMode(cepub.Binary)}, "no binary mode"},
		{"NoSource", cepub.Kafka, "", nil, "source"},
		{"UnknownMode", cepub.Kafka, "/s", []cepub.Option{cepub.WithMode(7)}, "WithMode"},
		{"UnknownBinding", 0, "/s", []cepub.Option{cepub.WithMode(cepub.Structured)}, "binding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := cepub.New(inner, tc.binding, tc.source, tc.opts...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestBadMessageFailsAlone(t *testing.T) {
	t.Parallel()
	inner := outboxtest.NewPublisher()
	p, err := cepub.New(inner, cepub.HTTP, "/s")
	require.NoError(t, err)
	good := message("", []byte(`1`))
	bad := message("", []byte(`{"broken"`))
	errs := p.Publish(t.Context(), []*outbox.Message{bad, nil, good})
	require.True(t, outbox.IsPermanent(errs[0]))
	require.True(t, outbox.IsPermanent(errs[1]))
	require.NoError(t, errs[2])
	require.Len(t, inner.Messages(), 1)
	require.Equal(t, "id-1", inner.Messages()[0].MessageID)
}
