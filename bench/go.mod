module github.com/idgen/idgen/bench

go 1.26.8

replace github.com/idgen/idgen => ../

require (
	github.com/bwmarrin/snowflake v0.3.0 // indirect
	github.com/sony/sonyflake/v2 v2.2.0 // indirect
)
