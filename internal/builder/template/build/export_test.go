package build

// For the external tests (package template_test).
var (
	OpenData    = openData
	OpenDir     = openDir
	TestRecords = testRecords
)
