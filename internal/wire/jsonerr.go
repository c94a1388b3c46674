package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
)

// DescribeJSON turns an error from decoding a client's JSON into a message
// in the client's terms: the field and the JSON type it expects, never
// the agent's Go type or field names.
func DescribeJSON(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		what := "the body"
		if te.Field != "" {
			what = te.Field
		}
		if n, ok := strings.CutPrefix(te.Value, "number "); ok && isInteger(te.Type) && wholeLiteral(n) && (n[0] != '-' || jsonKind(te.Type) == "a whole number") {
			// A whole number the field cannot hold: its kind is right,
			// its size is not.
			return what + " is out of range: " + n
		}
		return what + " must be " + jsonKind(te.Type) + ", not " + article(te.Value)
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return "unknown field " + f
	}
	return strings.TrimPrefix(msg, "json: ")
}

// jsonKind names what JSON value decodes into t.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number from 0"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON type"
}

// article prefixes a JSON value description ("array", "number -1") with
// a or an.
func article(v string) string {
	if v == "" {
		return "that"
	}
	if strings.ContainsRune("aeiou", rune(v[0])) {
		return "an " + v
	}
	return "a " + v
}

// isInteger reports whether t (behind pointers) is an integer type.
func isInteger(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// wholeLiteral reports whether a JSON number literal is written as a
// whole number (no fraction, no exponent).
func wholeLiteral(n string) bool {
	n = strings.TrimPrefix(n, "-")
	return n != "" && strings.Trim(n, "0123456789") == ""
}
