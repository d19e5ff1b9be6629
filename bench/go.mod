module github.com/idgen/idgen/bench

go 1.26.8

replace github.com/idgen/idgen => ../

require (
	github.com/bwmarrin/snowflake v0.3.0
	github.com/idgen/idgen v0.0.0-00010101000000-000000000000
	github.com/sony/sonyflake/v2 v2.2.0
)

require (
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
)
