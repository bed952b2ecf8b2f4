// Package redisfilter is a pre-filter on Redis for the inbox
// ([inbox.WithFilter]): a duplicate that Redis knows was committed returns
// inbox.Duplicate after one round trip, without a database transaction.
//
// The inbox table stays the source of truth. Redis marks a message done only
// after the inbox transaction committed; a Redis that is down, slow (each
// call is bounded by inbox.WithFilterTimeout, then bypassed for
// inbox.WithFilterCooldown) or that lost its keys makes the inbox ask the
// database, which decides. The cost: a first delivery makes two Redis round
// trips more than without the filter, so it pays off when duplicates are
// common or the database is the bottleneck (the inbox's BenchmarkProcess
// measures both paths).
//
// It lives apart from package inbox so that only services that use it
// import go-redis.
package redisfilter
