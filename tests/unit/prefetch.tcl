# Pipelines and key prefetching (src/prefetch.c): before running the
# requests a client pipelined, the server looks at up to prefetch-batch of
# them and prefetches their keys. That must change nothing a client can see:
# each pipeline below is sent in one write and every reply checked in order,
# with prefetching on (16), in batches of 2, and off (0). The pipelines mix
# what could trip a batch: a key deleted or the whole keyspace flushed
# after its prefetch, a transaction, inline requests, refused commands,
# CLIENT REPLY OFF, an argument read in place, the table growing halfway,
# a client killing itself, and a protocol error at the end.

proc pf {args} { ::redis::format_command {*}$args }

start_server {tags {prefetch}} {
    test {prefetch-batch is 16 by default, 0..16} {
        assert_equal {prefetch-batch 16} [r config get prefetch-batch]
        assert_error {*} {r config set prefetch-batch 17}
        r config set prefetch-batch 0
        r config set prefetch-batch 16
        r config get prefetch-batch
    } {prefetch-batch 16}

    foreach batch {16 2 0} {
        test "A mixed pipeline in one write, every reply in order (prefetch-batch $batch)" {
            r config set prefetch-batch $batch
            r flushall
            set big [string repeat x 40000]
            set buf {}
            set want {}
            foreach {req rep} [list \
                [pf set k1 10]                 "+OK\r\n" \
                [pf incr k1]                   ":11\r\n" \
                [pf get k1]                    "\$2\r\n11\r\n" \
                [pf setex k2 100 v2]           "+OK\r\n" \
                [pf get k2]                    "\$2\r\nv2\r\n" \
                [pf del k1]                    ":1\r\n" \
                [pf incr k1]                   ":1\r\n" \
                [pf get k1]                    "\$1\r\n1\r\n" \
                [pf multi]                     "+OK\r\n" \
                [pf incr k1]                   "+QUEUED\r\n" \
                [pf set k3 x]                  "+QUEUED\r\n" \
                [pf get k3]                    "+QUEUED\r\n" \
                [pf exec]                      "*3\r\n:2\r\n+OK\r\n\$1\r\nx\r\n" \
                "INCR k1\r\n"                  ":3\r\n" \
                [pf get]                       "-ERR wrong number of arguments for 'get' command\r\n" \
                [pf nosuch k1]                 "-ERR unknown command 'nosuch', with args beginning with: 'k1' \r\n" \
                [pf client reply off]          "" \
                [pf incr k1]                   "" \
                [pf get k1]                    "" \
                [pf client reply on]           "+OK\r\n" \
                [pf get k1]                    "\$1\r\n4\r\n" \
                [pf set big $big]              "+OK\r\n" \
                [pf strlen big]                ":40000\r\n" \
                [pf incr k1]                   ":5\r\n" \
                [pf flushall]                  "+OK\r\n" \
                [pf get k2]                    "\$-1\r\n" \
                [pf incr k2]                   ":1\r\n" \
                [pf get k3]                    "\$-1\r\n" \
                [pf mset k4 a k5 b]            "+OK\r\n" \
                [pf mget k4 k5 k6]             "*3\r\n\$1\r\na\r\n\$1\r\nb\r\n\$-1\r\n" \
                "*1\r\n\$x\r\n"                "-ERR Protocol error: invalid bulk length\r\n" \
                [pf set after 1]               "" \
            ] {
                append buf $req
                append want $rep
            }
            set batches [s prefetch_batches]
            set keys [s prefetch_keys]
            set fd [raw_connect]
            puts -nonewline $fd $buf
            flush $fd
            lassign [raw_read $fd 5000 300] data closed
            close $fd
            assert_equal $want $data
            assert_equal 1 $closed "closed after the protocol error?"
            # The batches really ran (or, off, did not).
            if {$batch == 0} {
                assert_equal $batches [s prefetch_batches]
            } else {
                assert_morethan [s prefetch_batches] $batches
                assert_morethan [s prefetch_keys] [expr {$keys + 10}]
            }
            list [r exists after] [r get k2] [r get k4]
        } {0 1 a}
    }

    foreach batch {16 0} {
        test "The keyspace grows and shrinks under a pipeline (prefetch-batch $batch)" {
            r config set prefetch-batch $batch
            r flushall
            # Every request's key was prefetched while the table had another
            # size: 20000 new keys make it grow (and rehash) many times
            # between a batch's prefetch and its commands, then DELs shrink it.
            set n 20000
            set buf {}
            for {set i 0} {$i < $n} {incr i} {
                append buf [pf set g:$i $i]
                append buf [pf get g:[expr {$i / 2}]]
                if {$i % 3 == 0} { append buf [pf incr g:[expr {$i / 3}]] }
            }
            for {set i 0} {$i < $n} {incr i 2} {
                append buf [pf del g:$i]
                append buf [pf get g:[expr {$i + 1}]]
            }
            set rd [redis_deferring_client]
            $rd write $buf
            $rd flush
            # The values as the server will have them, to check each reply.
            array set v {}
            for {set i 0} {$i < $n} {incr i} {
                set rep [$rd read]
                if {$rep ne "OK"} { fail "SET g:$i: '$rep'" }
                set v($i) $i
                set rep [$rd read]
                set j [expr {$i / 2}]
                if {$rep ne $v($j)} { fail "GET g:$j: '$rep', wanted '$v($j)'" }
                if {$i % 3 == 0} {
                    set j [expr {$i / 3}]
                    set rep [$rd read]
                    incr v($j)
                    if {$rep ne $v($j)} { fail "INCR g:$j: '$rep', wanted '$v($j)'" }
                }
            }
            for {set i 0} {$i < $n} {incr i 2} {
                set rep [$rd read]
                if {$rep ne 1} { fail "DEL g:$i: '$rep'" }
                set rep [$rd read]
                set j [expr {$i + 1}]
                if {$rep ne $v($j)} { fail "GET g:$j: '$rep', wanted '$v($j)'" }
            }
            $rd close
            r dbsize
        } {10000}
    }

    test {A client that kills itself mid-pipeline runs nothing after} {
        r config set prefetch-batch 16
        r del a b
        set fd [raw_connect]
        puts -nonewline $fd [pf client id]
        flush $fd
        lassign [raw_read $fd] data
        regexp {:(\d+)} $data -> id
        puts -nonewline $fd "[pf set a 1][pf get a][pf client kill id $id skipme no][pf set b 2][pf get b]"
        flush $fd
        lassign [raw_read $fd 3000 300] data closed
        close $fd
        assert_equal "+OK\r\n\$1\r\n1\r\n:1\r\n" $data
        assert_equal 1 $closed
        list [r get a] [r exists b]
    } {1 0}

    test {QUIT in a pipeline of prefetched requests} {
        r del q
        lassign [raw_send_recv "[pf set q 1][pf incr q][pf quit][pf incr q][pf incr q]"] data closed
        assert_equal "+OK\r\n:2\r\n+OK\r\n" $data
        assert_equal 1 $closed
        r get q
    } {2}

    test {Keys that expired are gone for every request of a pipeline} {
        r flushall
        for {set i 0} {$i < 32} {incr i} { r set e:$i $i px 1 }
        r set live 1
        after 20
        set buf {}
        for {set i 0} {$i < 32} {incr i} { append buf [pf get e:$i][pf get live] }
        lassign [raw_send_recv $buf] data
        assert_equal [string repeat "\$-1\r\n\$1\r\n1\r\n" 32] $data
        r dbsize
    } {1}

    test {ACL key patterns hold for every request of a pipeline} {
        r acl setuser pfuser on >pw ~ok:* +@all
        r set ok:1 a
        r set no:1 b
        set buf [pf auth pfuser pw]
        for {set i 0} {$i < 8} {incr i} { append buf [pf get ok:1][pf get no:1] }
        lassign [raw_send_recv $buf] data
        set lines [split [string trimright $data "\r\n"] "\n"]
        assert_equal "+OK\r" [lindex $lines 0]
        set denied 0
        set got 0
        foreach l [lrange $lines 1 end] {
            if {[string match "-NOPERM*" $l]} { incr denied }
            if {$l eq "a\r"} { incr got }
        }
        r acl deluser pfuser
        list $got $denied
    } {8 8}
}

start_server {tags {prefetch} overrides {requirepass pfpass}} {
    test {Requests before AUTH are refused, the ones after it in the same write are prefetched} {
        r auth pfpass
        set batches [s prefetch_batches]
        set buf "[pf incr n][pf incr n][pf auth pfpass]"
        for {set i 0} {$i < 20} {incr i} { append buf [pf incr n] }
        lassign [raw_send_recv $buf] data
        set want "-NOAUTH Authentication required.\r\n-NOAUTH Authentication required.\r\n+OK\r\n"
        for {set i 1} {$i <= 20} {incr i} { append want ":$i\r\n" }
        assert_equal $want $data
        assert_morethan [s prefetch_batches] $batches
        r get n
    } {20}
}
