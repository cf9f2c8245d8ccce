module ssaceiling

go 1.26
