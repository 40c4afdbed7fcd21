package core

import "encoding/json"

// Codec encodes a message into the payload that is stored and relayed.
type Codec interface {
	Marshal(m Message) ([]byte, error)
}

// JSON is the default Codec: encoding/json.
type JSON struct{}

// Marshal encodes m with encoding/json.
func (JSON) Marshal(m Message) ([]byte, error) { return json.Marshal(m) }

// CodecFunc adapts a function to a Codec.
type CodecFunc func(m Message) ([]byte, error)

// Marshal calls f.
func (f CodecFunc) Marshal(m Message) ([]byte, error) { return f(m) }
