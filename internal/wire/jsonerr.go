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
