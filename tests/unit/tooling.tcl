# The commands Redis tools send that a store of one database whose
# persistence is the append-only log answers in its own way: SWAPDB,
# LASTSAVE, SAVE and BGSAVE (docs/PROTOCOL.md, Server).

start_server {tags {tooling}} {
    test {SWAPDB 0 0 is OK; another index is out of range, a non-number named as Redis names it} {
        r set swapkey v
        assert_equal OK [r swapdb 0 0]
        assert_equal v [r get swapkey]
        assert_error {ERR DB index is out of range} {r swapdb 0 1}
        assert_error {ERR DB index is out of range} {r swapdb -1 0}
        assert_error {ERR invalid first DB index} {r swapdb x 0}
        assert_error {ERR invalid second DB index} {r swapdb 0 x}
        assert_equal v [r get swapkey]
    }

    test {LASTSAVE answers INFO persistence's rdb_last_save_time} {
        set info [r info persistence]
        regexp {rdb_last_save_time:(\d+)} $info -> t
        assert_equal $t [r lastsave]
    }

    test {SAVE and BGSAVE are refused, naming the append-only file; nothing changes} {
        r set savekey v
        set n [r dbsize]
        assert_error {ERR SAVE is not supported: there are no RDB snapshots; the append-only file*} {r save}
        assert_error {ERR BGSAVE is not supported: there are no RDB snapshots*BGREWRITEAOF*} {r bgsave}
        assert_error {ERR BGSAVE is not supported*} {r bgsave schedule}
        assert_error {ERR syntax error} {r bgsave now}
        assert_equal $n [r dbsize]
        assert_match {*rdb_bgsave_in_progress:0*} [r info persistence]
    }

    test {COMMAND INFO of SWAPDB, LASTSAVE, SAVE, BGSAVE: Redis's arity, flags and categories} {
        set infos [r command info swapdb lastsave save bgsave]
        assert_equal {swapdb 3 {write fast} 0 0 0} [lrange [lindex $infos 0] 0 5]
        assert_equal {@keyspace @write @fast @dangerous} [lindex $infos 0 6]
        assert_equal {lastsave 1 {loading stale fast} 0 0 0} [lrange [lindex $infos 1] 0 5]
        assert_equal {@admin @fast @dangerous} [lindex $infos 1 6]
        assert_equal {@admin @slow @dangerous} [lindex $infos 2 6]
        assert_equal {bgsave -1} [lrange [lindex $infos 3] 0 1]
        assert_equal {@admin @slow @dangerous} [lindex $infos 3 6]
    }
}

# LATENCY (src/latencymon.c): the monitor's events and the per-command
# histograms, in the shapes redis_exporter and redis-cli read.
start_server {tags {tooling latency}} {
    test {LATENCY with the monitor off: nothing recorded, and DOCTOR says how to turn it on} {
        assert_equal 0 [lindex [r config get latency-monitor-threshold] 1]
        r debug sleep 0.02
        assert_equal {} [r latency latest]
        assert_equal {} [r latency history command]
        assert_match {*disabled*latency-monitor-threshold*} [r latency doctor]
        assert_equal 0 [r latency reset]
    }

    test {LATENCY LATEST and HISTORY record a command over the threshold; RESET clears them} {
        r config set latency-monitor-threshold 10
        r debug sleep 0.03
        r ping
        set latest [r latency latest]
        assert_equal 1 [llength $latest]
        lassign [lindex $latest 0] event when last max
        assert_equal command $event
        assert_morethan_equal $last 30
        assert_morethan_equal $max $last
        assert_lessthan_equal [expr {abs($when - [clock seconds])}] 5
        set hist [r latency history command]
        assert_equal 1 [llength $hist]
        assert_equal [list $when $last] [lindex $hist 0]
        assert_equal {} [r latency history fast-command]
        assert_match {*command: 1 spikes*} [r latency doctor]
        assert_equal 0 [r latency reset nosuch]
        assert_equal 1 [r latency reset command nosuch]
        assert_equal {} [r latency latest]
        r config set latency-monitor-threshold 0
    }

    test {LATENCY HISTOGRAM: calls and cumulative counts below powers of two, named commands only} {
        r config resetstat
        r set h1 v
        r set h2 v
        r get h1
        set reply [r latency histogram set get nosuch set]
        assert_equal {set get} [dict keys $reply]
        set s [dict get $reply set]
        assert_equal 2 [dict get $s calls]
        set buckets [dict get $s histogram_usec]
        set prev 0
        foreach {bound count} $buckets {
            # each bound a power of two, each count larger than the last
            assert_equal 0 [expr {$bound & ($bound - 1)}]
            assert_morethan $count $prev
            set prev $count
        }
        assert_equal 2 $prev
        assert_equal 1 [dict get [dict get $reply get] calls]
        assert_equal {} [r latency histogram nosuch]
        assert {[dict exists [r latency histogram] set]}
    }

    test {LATENCY: a wrong subcommand or arity is refused as Redis refuses it} {
        assert_error {ERR unknown subcommand 'graph'. Try LATENCY HELP.} {r latency graph command}
        assert_error {ERR wrong number of arguments for 'latency|history' command} {r latency history}
        assert_error {ERR wrong number of arguments for 'latency|latest' command} {r latency latest x}
        assert_error {*argument must be between 0 and*} {r config set latency-monitor-threshold -1}
        assert_equal 0 [lindex [r config get latency-monitor-threshold] 1]
    }
}

# MEMORY STATS/DOCTOR/MALLOC-STATS/PURGE (db.c): Redis's field names, so
# exporters that read them by name find them.
start_server {tags {tooling memory}} {
    test {MEMORY STATS has Redis 7.0's fields, in its order, and the pool's} {
        for {set i 0} {$i < 50} {incr i} { r set mk$i [string repeat x 100] }
        set stats [r memory stats]
        set want [list peak.allocated total.allocated startup.allocated replication.backlog clients.slaves \
                  clients.normal cluster.links aof.buffer lua.caches functions.caches db.0 overhead.total \
                  keys.count keys.bytes-per-key dataset.bytes dataset.percentage peak.percentage \
                  allocator.allocated allocator.active allocator.resident allocator-fragmentation.ratio \
                  allocator-fragmentation.bytes allocator-rss.ratio allocator-rss.bytes rss-overhead.ratio \
                  rss-overhead.bytes fragmentation fragmentation.bytes pool.size pool.used]
        assert_equal $want [dict keys $stats]
        assert_equal {overhead.hashtable.main overhead.hashtable.expires} [dict keys [dict get $stats db.0]]
        assert_equal [r dbsize] [dict get $stats keys.count]
        assert_morethan_equal [dict get $stats peak.allocated] [dict get $stats total.allocated]
        assert_morethan [dict get $stats clients.normal] 0
        assert_morethan_equal [dict get $stats pool.used] 5000
        assert_equal [lindex [r config get segment-size] 1] [dict get $stats pool.size]
        assert {[string is double -strict [dict get $stats fragmentation]]}
    }

    test {INFO memory has used_memory_peak, used_memory_startup and mem_fragmentation_ratio} {
        set info [r info memory]
        assert_match "*\r\nused_memory_peak:*" $info
        assert_match "*\r\nused_memory_startup:*" $info
        regexp {\r\nused_memory:(\d+)\r\n} $info -> used
        regexp {\r\nused_memory_peak:(\d+)\r\n} $info -> peak
        assert_morethan_equal $peak $used
        assert_match "*\r\nmem_fragmentation_ratio:*.*" $info
    }

    test {MEMORY DOCTOR, MALLOC-STATS and PURGE answer} {
        assert_match {*nothing to diagnose*} [r memory doctor]
        assert {[string length [r memory malloc-stats]] > 0}
        assert_equal OK [r memory purge]
        assert_error {ERR unknown subcommand 'nosuch'. Try MEMORY HELP.} {r memory nosuch}
        assert_error {ERR wrong number of arguments for 'memory|stats' command} {r memory stats x}
    }

    test {MEMORY STATS and DOCTOR are refused to a tenant (a user restricted to key patterns)} {
        r acl setuser tenant on >pw ~tenant:* +@all
        set t [redis_client]
        $t auth tenant pw
        assert_error {NOPERM MEMORY STATS shows the whole server*} {$t memory stats}
        assert_error {NOPERM MEMORY DOCTOR*} {$t memory doctor}
        $t close
        r acl deluser tenant
    }
}

# CLIENT PAUSE / UNPAUSE (networking.c): paused commands wait, with what
# their client pipelined behind them, and run in order when the pause ends.
proc blocked_clients {} {
    regexp {blocked_clients:(\d+)} [r info clients] -> n
    return $n
}

start_server {tags {tooling pause}} {
    test {CLIENT PAUSE WRITE holds writes and their pipeline; reads go on; UNPAUSE runs them in order} {
        r set pk old
        assert_equal OK [r client pause 100000 write]
        set rd [redis_deferring_client]
        $rd set pk new
        $rd get pk
        $rd flush
        wait_for_condition 100 20 {[blocked_clients] == 1} else { fail "the SET was not paused" }
        assert_equal old [r get pk]
        assert_match "*flags=b *" [r client list]
        assert_error {ERR CLIENT PAUSE mode must be WRITE or ALL} {r client pause 10 sometimes}
        assert_equal OK [r client unpause]
        assert_equal OK [$rd read]
        assert_equal new [$rd read]
        assert_equal new [r get pk]
        assert_equal 0 [blocked_clients]
        $rd close
    }

    test {CLIENT PAUSE WRITE holds an EXEC whose transaction writes, and PUBLISH} {
        r set tk old
        set rd [redis_deferring_client]
        $rd multi
        $rd set tk new
        $rd flush
        assert_equal OK [$rd read]
        assert_equal QUEUED [$rd read]
        r client pause 100000 write
        $rd exec
        $rd flush
        set pub [redis_deferring_client]
        $pub publish chan msg
        $pub flush
        wait_for_condition 100 20 {[blocked_clients] == 2} else { fail "EXEC and PUBLISH were not paused" }
        assert_equal old [r get tk]
        r client unpause
        assert_equal OK [$rd read]
        assert_equal 0 [$pub read]
        assert_equal new [r get tk]
        $rd close
        $pub close
    }

    test {A paused client that is killed meanwhile runs nothing; the server goes on} {
        r set kk old
        r client pause 100000 write
        set rd [redis_deferring_client]
        $rd client id
        $rd flush
        set id [$rd read]
        $rd set kk new
        $rd flush
        wait_for_condition 100 20 {[blocked_clients] == 1} else { fail "the SET was not paused" }
        assert_equal 1 [r client kill id $id]
        r client unpause
        assert_equal old [r get kk]
        assert_equal 0 [blocked_clients]
        assert_equal PONG [r ping]
        $rd close
    }

    test {CLIENT PAUSE ALL holds every command, UNPAUSE included, until its timeout} {
        r set ak old
        set rd [redis_deferring_client]
        set rd2 [redis_deferring_client]
        r client pause 300 all
        $rd set ak new
        $rd flush
        # Even UNPAUSE waits under ALL (as Redis 7.0): the timeout ends the pause.
        $rd2 client unpause
        $rd2 flush
        assert_equal OK [$rd read]
        assert_equal OK [$rd2 read]
        assert_equal new [r get ak]
        assert_equal 0 [blocked_clients]
        $rd close
        $rd2 close
    }

    test {Held commands are looked at once when the pause ends, not on every event-loop turn} {
        # 20 paused writers, then 200 reads from another client (each one
        # event-loop turn): the held SETs are run again only at UNPAUSE.
        r client pause 100000 write
        set rds {}
        for {set i 0} {$i < 20} {incr i} {
            set rd [redis_deferring_client]
            $rd set hk$i v
            $rd flush
            lappend rds $rd
        }
        wait_for_condition 100 20 {[blocked_clients] == 20} else { fail "the SETs were not paused" }
        assert_equal OK [r debug visits reset]
        for {set i 0} {$i < 200} {incr i} { r get hk0 }
        assert_equal 0 [dict get [r debug visits] paused]
        r client unpause
        foreach rd $rds { assert_equal OK [$rd read]; $rd close }
        assert_equal 20 [dict get [r debug visits] paused]
        assert_equal 0 [blocked_clients]
    }

    test {A wall-clock step neither ends a pause nor stretches it} {
        r set wk old
        r client pause 100000 write
        set rd [redis_deferring_client]
        $rd set wk new
        $rd flush
        wait_for_condition 100 20 {[blocked_clients] == 1} else { fail "the SET was not paused" }
        assert_equal OK [r debug wallclock-step 200000]
        r ping
        assert_equal 1 [blocked_clients]
        assert_equal old [r get wk]
        assert_equal OK [r debug wallclock-step -200000]
        r client unpause
        assert_equal OK [$rd read]
        assert_equal new [r get wk]
        $rd close
    }

    # As Redis: a pause holds the dataset still for the replicas and the
    # log, so a read of an expired key answers as if it were gone but the
    # key stays (no DEL recorded) until the pause ends. It was deleted by
    # the read (found comparing with redis-server 7.0).
    test {Under CLIENT PAUSE a read of an expired key answers it gone, and the key stays until the pause ends} {
        r flushall
        set expired [s expired_keys]
        # One write: no cron tick between the SET and the pause.
        set rd [redis_deferring_client]
        $rd set pk v px 50
        $rd set keep v
        $rd client pause 100000 write
        $rd flush
        assert_equal {OK OK OK} [list [$rd read] [$rd read] [$rd read]]
        $rd close
        wait_for_condition 100 20 {[r exists pk] == 0} else { fail "pk never expired" }
        assert_equal {} [r get pk]
        assert_equal -2 [r pttl pk]
        assert_equal {keep} [r keys *]
        assert_equal {0 keep} [r scan 0]
        assert_equal 2 [r dbsize]
        assert_equal $expired [s expired_keys]
        r client unpause
        wait_for_condition 100 20 {[r dbsize] == 1} else { fail "pk stayed after the pause" }
        assert_equal [expr {$expired + 1}] [s expired_keys]
    }

    test {CLIENT PAUSE refuses a bad timeout or mode and pauses nothing} {
        assert_error {ERR timeout is not an integer or out of range} {r client pause abc}
        assert_error {ERR timeout is negative} {r client pause -1}
        assert_error {ERR CLIENT PAUSE mode must be WRITE or ALL} {r client pause 100000 never}
        assert_error {ERR unknown subcommand or wrong number of arguments for 'pause'*} {r client pause 1 write x}
        assert_equal OK [r set nk v]
        set infos [r command info client|pause client|unpause]
        assert_equal {client|pause -3 {admin loading stale} 0 0 0} [lrange [lindex $infos 0] 0 5]
        assert_equal {@admin @slow @dangerous @connection} [lindex $infos 0 6]
        assert_equal {client|unpause 2} [lrange [lindex $infos 1] 0 1]
    }
}

# Eviction waits out a pause too: a large SET value arriving meanwhile is
# read into the heap, not placed in a full pool by evicting (it evicted
# while the pause held the dataset still).
start_server {tags {tooling pause} overrides {segment-size 1mb evict-policy lru evict-high-watermark 1}} {
    test {Under CLIENT PAUSE a large SET that needs room evicts nothing until it runs} {
        for {set i 0} {$i < 12} {incr i} { r set fill:$i [string repeat f 65536] }
        set evicted [s evicted_keys]
        r client pause 100000 write
        set rd [redis_deferring_client]
        $rd set big [string repeat b [expr {400 * 1024}]]
        $rd flush
        wait_for_condition 100 20 {[blocked_clients] == 1} else { fail "the SET was not paused" }
        assert_equal 12 [r dbsize]
        assert_equal $evicted [s evicted_keys]
        r client unpause
        assert_equal OK [$rd read]
        assert_morethan [s evicted_keys] $evicted
        assert_equal [expr {400 * 1024}] [r strlen big]
        $rd close
    }
}

# INFO stats' instantaneous_* rates (info.c), which Redis dashboards graph.
start_server {tags {tooling info}} {
    test {INFO stats has instantaneous_ops_per_sec and _input/_output_kbps, and they rise under traffic} {
        set info [r info stats]
        assert_match "*\r\ninstantaneous_ops_per_sec:*" $info
        assert_match "*\r\ninstantaneous_input_kbps:*.*" $info
        assert_match "*\r\ninstantaneous_output_kbps:*.*" $info
        proc inst_field {name} {
            for {set i 0} {$i < 200} {incr i} { r ping }
            regexp "\r\n$name:(\[0-9.\]+)\r\n" [r info stats] -> v
            return $v
        }
        wait_for_condition 100 10 {[inst_field instantaneous_ops_per_sec] > 0} else {
            fail "instantaneous_ops_per_sec stayed 0"
        }
        wait_for_condition 100 10 {[inst_field instantaneous_input_kbps] > 0} else {
            fail "instantaneous_input_kbps stayed 0"
        }
    }
}

start_server {tags {tooling resp3}} {
    test {MEMORY STATS, LATENCY HISTOGRAM and LATEST under RESP3: maps whose lengths match what follows} {
        set c [redis_client]
        $c hello 3
        $c set k v
        set stats [$c memory stats]
        assert_equal 30 [dict size $stats]
        assert_equal 2 [dict size [dict get $stats db.0]]
        set h [$c latency histogram set]
        assert_equal {calls histogram_usec} [dict keys [dict get $h set]]
        $c config set latency-monitor-threshold 1
        $c debug sleep 0.01
        assert_equal command [lindex [$c latency latest] 0 0]
        # the stream is in step: the next reply is the next command's
        assert_equal PONG [$c ping]
        $c close
    }
}

# MODULE and the tracking getters (server.c, client.c): what client
# libraries ask on connecting, answered with "none" and "off".
start_server {tags {tooling}} {
    test {MODULE LIST is empty; LOAD is refused saying why; UNLOAD as Redis for a name not loaded} {
        assert_equal {} [r module list]
        assert_error {ERR modules cannot be loaded: this server has no module interface yet*} {r module load modules/x.so}
        assert_error {ERR modules cannot be loaded*} {r module loadex modules/x.so}
        assert_error {ERR Error unloading module: no such module with that name} {r module unload search}
        assert_error {ERR unknown subcommand 'nosuch'. Try MODULE HELP.} {r module nosuch}
        assert_equal {} [r module list]
    }

    test {CLIENT GETREDIR and TRACKINGINFO say tracking is off; CLIENT TRACKING stays refused} {
        assert_equal -1 [r client getredir]
        assert_equal {flags off redirect -1 prefixes {}} [r client trackinginfo]
        assert_error {ERR unknown subcommand 'tracking'. Try CLIENT HELP.} {r client tracking on}
        set c [redis_client]
        $c hello 3
        assert_equal {flags off redirect -1 prefixes {}} [$c client trackinginfo]
        assert_equal PONG [$c ping]
        $c close
    }
}

start_server {tags {tooling pause}} {
    test {During CLIENT PAUSE the cron expires nothing; after UNPAUSE it does} {
        r set ek v px 50
        r client pause 100000 write
        # Long enough for several cron ticks past the expiry (hz 10).
        after 400
        assert_equal 1 [r dbsize]
        r client unpause
        wait_for_condition 100 20 {[r dbsize] == 0} else { fail "the key never expired after the pause" }
    }
}
