package stats

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// MarshalJSON lays s out by Fields: each figure under its Name, a
// dotted one inside its group's object; a tier the mount lacks, and
// request counts before any request, are left out.
func (s Snapshot) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	open := ""         // the group whose object is open
	top, inner := 0, 0 // members written at the top and in the open object
	for _, f := range Fields {
		v, ok := f.json(&s)
		if !ok {
			continue
		}
		if g := f.Group(); g != open {
			if open != "" {
				b.WriteByte('}')
			}
			if g != "" {
				writeKey(&b, g, top)
				b.WriteByte('{')
				top, inner = top+1, 0
			}
			open = g
		}
		if open == "" {
			writeKey(&b, f.Key(), top)
			top++
		} else {
			writeKey(&b, f.Key(), inner)
			inner++
		}
		b.Write(v)
	}
	if open != "" {
		b.WriteByte('}')
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeKey(b *bytes.Buffer, key string, n int) {
	if n > 0 {
		b.WriteByte(',')
	}
	b.WriteString(strconv.Quote(key))
	b.WriteByte(':')
}

// json is f's value in s as JSON, if s has it.
func (f Field) json(s *Snapshot) ([]byte, bool) {
	switch f.Kind {
	case ByOp:
		ops := f.Ops(s)
		if len(ops) == 0 {
			return nil, false
		}
		b, err := json.Marshal(ops)
		return b, err == nil
	case State:
		w, ok := f.Word(s)
		if !ok {
			return nil, false
		}
		b, err := json.Marshal(w)
		return b, err == nil
	}
	v, ok := f.Int(s)
	return strconv.AppendInt(nil, v, 10), ok
}

// UnmarshalJSON reads what MarshalJSON wrote, from this daemon or
// another: a tier is there when any of its figures is, a figure the
// JSON lacks is absent (Field.Int says so), and names no Field has are
// ignored.
func (s *Snapshot) UnmarshalJSON(data []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return err
	}
	groups := map[string]map[string]json.RawMessage{"": top}
	*s = Snapshot{absent: map[string]bool{}}
	for _, f := range Fields {
		g := f.Group()
		obj, ok := groups[g]
		if !ok && top[g] != nil {
			if err := json.Unmarshal(top[g], &obj); err != nil {
				return fmt.Errorf("%s: %w", g, err)
			}
		}
		groups[g] = obj
		raw, ok := obj[f.Key()]
		if !ok {
			s.absent[f.Name] = true
			continue
		}
		if err := json.Unmarshal(raw, f.target(s)); err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
	}
	return nil
}

// target is where f's value in s is decoded into, its tier made if s
// has none yet.
func (f Field) target(s *Snapshot) any {
	switch f.Kind {
	case ByOp:
		return f.ops(s)
	case State:
		return f.word(s, true)
	}
	return f.num(s, true)
}

// Row is one line of `kvfs stats`: a figure's Name (with the request
// type after a dot for a ByOp), and its value.
type Row struct{ Name, Value string }

// Rows are s's figures as `kvfs stats` prints them, in Fields' order.
func (s *Snapshot) Rows() []Row {
	var rows []Row
	for _, f := range Fields {
		switch f.Kind {
		case ByOp:
			ops := f.Ops(s)
			for _, op := range slices.Sorted(maps.Keys(ops)) {
				rows = append(rows, Row{f.Name + "." + op, strconv.FormatInt(ops[op], 10)})
			}
		case State:
			if w, ok := f.Word(s); ok {
				rows = append(rows, Row{f.Name, w})
			}
		default:
			if v, ok := f.Int(s); ok {
				rows = append(rows, Row{f.Name, strconv.FormatInt(v, 10)})
			}
		}
	}
	return rows
}
