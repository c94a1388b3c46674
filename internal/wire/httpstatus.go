package wire

import "net/http"

// HTTPStatus is the HTTP status that answers an error of code on the
// plain HTTP surfaces (the adapters' REST routes).
func HTTPStatus(code Code) int {
	switch code {
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict:
		return http.StatusConflict
	case CodeUnsupported:
		return http.StatusNotImplemented
	case CodeLimit:
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
