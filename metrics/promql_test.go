package metrics_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// promqlWords are the PromQL keywords that look like metric names but are not.
var promqlWords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
}

// promqlAggregations may be followed by a grouping clause before their "(".
var promqlAggregations = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// promqlGrouping are the keywords followed by a parenthesised list of label names.
var promqlGrouping = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// metricNames returns the metric names a PromQL expression (or a Grafana query,
// which may hold $variables) selects, in order, with repeats. It is not a full
// parser: it skips strings, label matchers {...}, ranges [...], $variables,
// numbers and durations, aggregation names, function names (a word followed
// by "(") and the label lists of by/without/on/ignoring/group_left/group_right.
func metricNames(expr string) []string {
	var names []string
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(expr, i)
		case c == '{':
			i = skipBalanced(expr, i, '{', '}')
		case c == '[':
			i = skipBalanced(expr, i, '[', ']')
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				i = skipBalanced(expr, i, '{', '}')
			}
			for i < len(expr) && isWordChar(expr[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isWordChar(expr[i]) || expr[i] == '.') {
				i++
			}
		case isWordChar(c):
			j := i
			for j < len(expr) && isWordChar(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
				k++
			}
			i = j
			switch {
			case promqlGrouping[word]:
				if k < len(expr) && expr[k] == '(' {
					i = skipBalanced(expr, k, '(', ')')
				}
			case promqlWords[word], promqlAggregations[word]:
			case k < len(expr) && expr[k] == '(':
				// a function or an aggregation
			default:
				names = append(names, word)
			}
		default:
			i++
		}
	}
	return names
}

func isWordChar(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// skipString returns the index after the string literal starting at i.
func skipString(s string, i int) int {
	quote := s[i]
	for i++; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quote != '`':
			i++
		case s[i] == quote:
			return i + 1
		}
	}
	return len(s)
}

// skipBalanced returns the index after the close that matches the open at i.
func skipBalanced(s string, i int, open, close byte) int {
	depth := 0
	for i < len(s) {
		switch c := s[i]; {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(s, i)
			continue
		case c == open:
			depth++
		case c == close:
			depth--
			if depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return len(s)
}

func TestMetricNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`max by (job, relay) (outbox_pending_messages) > 1000`, []string{"outbox_pending_messages"}},
		{`sum(rate(a_total{result=~"sent|x", q="}{[("}[5m])) by (le) / sum without(instance)(b)`,
			[]string{"a_total", "b"}},
		{`histogram_quantile(0.99, sum by (le) (rate(h_bucket{job=~"$job"}[$__rate_interval])))`, []string{"h_bucket"}},
		{`(x == 0) or on(job) (up{job=~"outbox.*"} == bool 0) unless y offset 5m`, []string{"x", "up", "y"}},
		{`a * on (instance) group_left (version) b_info`, []string{"a", "b_info"}},
		{`topk(10, c) / ${rate} + 1e3 - .5`, []string{"c"}},
		{`label_replace(d, "dst", "$1", "src", "(.*)")`, []string{"d"}},
		{`{__name__="hidden"}`, nil},
		{`rate(e[5m] @ end())`, []string{"e"}},
		{"ns:rule:sum\n  > inf", []string{"ns:rule:sum"}},
	} {
		require.Equal(t, tc.want, metricNames(tc.expr), tc.expr)
	}
}
