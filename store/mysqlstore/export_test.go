package mysqlstore

// WithChunkRows lets tests cross statement boundaries with small batches.
var WithChunkRows = withChunkRows
