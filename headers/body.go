package headers

import (
	"net/http"
	"strconv"
)

// Values for the bodies of 429 responses.
const (
	// ErrorCode is the code of the JSON error body.
	ErrorCode = "rate_limit_exceeded"

	// ContentTypeJSON is the media type of the JSON error body.
	ContentTypeJSON = "application/json"

	// ContentTypeProblem is the media type of RFC 9457 problem details.
	ContentTypeProblem = "application/problem+json"

	// ProblemTypeQuotaExceeded is the problem type the RateLimit draft
	// registers for requests exceeding a quota policy (section 5.1).
	ProblemTypeQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

	// ProblemTitleQuotaExceeded is the title registered with that type.
	ProblemTitleQuotaExceeded = "Quota Exceeded"
)

// ErrorBody is the JSON body of a 429 response:
//
//	{"error":{"code":"rate_limit_exceeded","message":"...","policy":"default",
//	  "limit":100,"remaining":0,"reset":17,"retry_after":17}}
//
// Marshal it with encoding/json; unmarshal into it to read one. The zero
// value is an empty body. It is a plain value, safe to copy and share.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the content of an ErrorBody. Times are whole seconds,
// rounded up, equal to the fields Write sends for the same Report. The zero
// value is empty; it is a plain value, safe to copy and share.
type ErrorDetail struct {
	Code       string `json:"code"`             // ErrorCode
	Message    string `json:"message"`          // for people, not programs
	Policy     string `json:"policy,omitempty"` // the policy's name: of several, the one that bound
	Limit      int64  `json:"limit"`            // the policy's quota
	Remaining  int64  `json:"remaining"`        // units left (0 on a denial)
	Reset      int64  `json:"reset"`            // seconds, as the reset fields (t)
	RetryAfter int64  `json:"retry_after"`      // seconds, as Retry-After
}

// NewErrorBody returns the JSON error body for rep, consistent with the
// fields Write sends for it.
func NewErrorBody(rep Report) ErrorBody {
	return ErrorBody{Error: ErrorDetail{
		Code:       ErrorCode,
		Message:    denialMessage(rep),
		Policy:     rep.Policy.Name,
		Limit:      rep.Policy.Quota,
		Remaining:  rep.Remaining,
		Reset:      rep.ResetSeconds(),
		RetryAfter: rep.RetryAfterSeconds(),
	}}
}

// Problem is an RFC 9457 problem details object with the extension member
// the RateLimit draft defines, violated-policies. The zero value is empty.
// It is safe to copy and share; ViolatedPolicies is shared by copies.
type Problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title,omitempty"`
	Status           int      `json:"status,omitempty"`
	Detail           string   `json:"detail,omitempty"`
	Instance         string   `json:"instance,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// NewProblem returns the quota-exceeded problem details for rep, with status
// 429 and rep's policy as the violated policy.
func NewProblem(rep Report) Problem {
	return Problem{
		Type:             ProblemTypeQuotaExceeded,
		Title:            ProblemTitleQuotaExceeded,
		Status:           http.StatusTooManyRequests,
		Detail:           denialMessage(rep),
		ViolatedPolicies: []string{rep.Policy.Name},
	}
}

func denialMessage(rep Report) string {
	s := rep.RetryAfterSeconds()
	unit := " seconds."
	if s == 1 {
		unit = " second."
	}
	return "Rate limit exceeded; retry after " + strconv.FormatInt(s, 10) + unit
}
