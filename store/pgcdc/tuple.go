package pgcdc

import (
	"encoding/binary"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// tupleCol is one column of a row in a pgoutput message: its kind (text,
// binary, NULL or unchanged TOAST, pglogrepl's TupleDataType values) and,
// for text and binary, its bytes, a slice of the message.
type tupleCol struct {
	kind uint8
	data []byte
}

// readInsert reads a pgoutput insert message after its type byte: the
// relation's id and the new row's columns, appended to cols, each slicing
// data (no copy: the stream's buffer is reused, so a caller copies what it
// keeps). pglogrepl.Parse reads the same message, allocating and copying
// every column; the stream is nearly all inserts, so they are read here,
// checked against the message's length where pglogrepl does not.
func readInsert(data []byte, cols []tupleCol) (relID uint32, _ []tupleCol, err error) {
	if len(data) < 7 {
		return 0, cols, fmt.Errorf("insert message of %d bytes", len(data))
	}
	relID = binary.BigEndian.Uint32(data)
	if data[4] != 'N' {
		return 0, cols, fmt.Errorf("insert message: tuple type %q, not 'N'", data[4])
	}
	n := int(binary.BigEndian.Uint16(data[5:]))
	p := 7
	for i := range n {
		if p >= len(data) {
			return 0, cols, fmt.Errorf("insert message: column %d of %d past its end", i+1, n)
		}
		c := tupleCol{kind: data[p]}
		p++
		switch c.kind {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if len(data)-p < 4 {
				return 0, cols, fmt.Errorf("insert message: column %d of %d: length past its end", i+1, n)
			}
			l := int(binary.BigEndian.Uint32(data[p:]))
			p += 4
			if l < 0 || l > len(data)-p {
				return 0, cols, fmt.Errorf("insert message: column %d of %d: %d bytes, %d left", i+1, n, l, len(data)-p)
			}
			c.data = data[p : p+l : p+l]
			p += l
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		default:
			return 0, cols, fmt.Errorf("insert message: column %d of %d: kind %q", i+1, n, c.kind)
		}
		cols = append(cols, c)
	}
	return relID, cols, nil
}
