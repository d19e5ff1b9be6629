// Package strictjson checks log lines as strict JSON: one object per line,
// no key twice in any object (issue 32: a node printed "idc" twice, which
// encoding/json and most log shippers accept silently, keeping one).
package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Check returns nil when line is exactly one JSON object in which no
// object, at any depth, has a key twice, and otherwise says what is
// wrong. encoding/json accepts duplicate keys (the last wins), so the
// check walks the tokens itself.
func Check(line string) error {
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("not a JSON object: starts with %v", tok)
	}
	if err := strictObject(dec, ""); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("more than one JSON value on the line (%v)", err)
	}
	return nil
}

// strictObject reads the rest of an object whose '{' was read, refusing a
// repeated key; path names the object in errors.
func strictObject(dec *json.Decoder, path string) error {
	seen := map[string]bool{}
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok == json.Delim('}') {
			return nil
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("object key %v is not a string", tok)
		}
		if seen[key] {
			return fmt.Errorf("duplicate key %q", path+key)
		}
		seen[key] = true
		if err := strictValue(dec, path+key+"."); err != nil {
			return err
		}
	}
}

// strictValue reads one value, checking the objects inside it.
func strictValue(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return strictObject(dec, path)
	case json.Delim('['):
		for dec.More() {
			if err := strictValue(dec, path); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return nil
}
