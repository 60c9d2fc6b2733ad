# Cluster mode from the clients' side: what redis-cli --cluster, redis-cli -c,
# redis-benchmark --cluster and redis-py's RedisCluster need from a node.
#
# The same tests run against two kinds of cluster (support/cluster.tcl):
# Debian's redis-server, the reference that proves each test right, and
# ours (mooncake-server nodes sharing one etcd).  While cluster mode is not
# built into mooncake-server, its half is skipped with the reason; then the
# same tests run unchanged.  Tests that only make sense for ours (store
# commands, etcd going away) come last in the mooncake half.
#
# One cluster per kind carries the whole sequence: fresh nodes, create,
# the read-only views, redirections, a hand-made slot migration (ASK,
# MIGRATE, SETSLOT NODE), reshard and rebalance under live traffic, a 4th
# node added and removed, clients, a node killed and restarted, every node
# restarted, utils/create-cluster.  A step that fails half-way (an open slot
# left behind) is repaired with redis-cli --cluster fix at the start of the
# tests that need a sound cluster (cluster_settle), so that one failure is
# not reported a dozen times.
#
# Tags: cluster, cluster-redis / cluster-mooncake (and mooncake), so
# `--tags cluster-redis` runs the reference half alone.  Live traffic goes
# through tests/helpers/cluster_traffic.py, redis-py round trips through
# tests/helpers/redis_py_cluster_check.py (Debian's python3-redis).

source [file join $::harness(testsdir) support cluster.tcl]

set ::node_timeout 2000
set ::py [find_program /usr/bin/python3]
set ::bench [find_program redis-benchmark]

proc need_redis_py {} {
    if {$::py eq ""} { skip "/usr/bin/python3 is not installed" }
    if {[catch {exec $::py -c "import redis.cluster"}]} {
        skip "redis-py with RedisCluster is not installed for /usr/bin/python3 (Debian python3-redis)"
    }
}

# Every slot of 0..16383 exactly once in the CLUSTER NODES of node via.
proc assert_full_coverage {via} {
    set seen [lrepeat 16384 {}]
    foreach n [cluster_nodes $via] {
        foreach r [cluster_ranges_of [dict get $n slots]] {
            lassign $r lo hi
            assert {$lo <= $hi && $lo >= 0 && $hi < 16384}
            for {set s $lo} {$s <= $hi} {incr s} {
                if {[lindex $seen $s] ne ""} {
                    fail "node $via: slot $s served by both [lindex $seen $s] and [dict get $n id]"
                }
                lset seen $s [dict get $n id]
            }
        }
    }
    set missing [lsearch -all -exact $seen {}]
    if {[llength $missing]} {
        fail "node $via: [llength $missing] slots not served (first [lindex $missing 0])"
    }
}

# {id {ranges}} of every master as node via sees it, sorted, for comparing views.
proc slot_map {via} {
    set out {}
    foreach n [cluster_nodes $via] {
        lappend out [list [dict get $n id] [dict get $n port] [cluster_ranges_of [dict get $n slots]]]
    }
    lsort -index 0 $out
}

# Is slot in one of the ranges?
proc in_ranges {slot ranges} {
    foreach r $ranges {
        if {$slot >= [lindex $r 0] && $slot <= [lindex $r 1]} { return 1 }
    }
    return 0
}

# The flags node via gives the node with this id ("" if it does not list it).
proc node_flags {via nodeid} {
    foreach n [cluster_nodes $via] {
        if {[dict get $n id] eq $nodeid} { return [dict get $n flags] }
    }
    return {}
}

# The error a command raises, or "" if it raised none.
proc err_of {script} {
    if {[catch {uplevel 1 $script} e]} { return $e }
    return ""
}

# redis-cli with commands on stdin (one per line); returns the output lines
# without redis-cli -c's "-> Redirected to slot [S] located at H:P" notes,
# which go to the variable ::redirects.
proc cli_pipe {port lines args} {
    set cmd [list {*}$::cluster(timeout_cmd) env TERM=dumb $::cluster(cli) -h 127.0.0.1 -p $port {*}$args]
    if {[catch {exec {*}$cmd << [join $lines "\n"]\n 2>@1} out]} {
        fail "redis-cli -p $port $args failed: $out"
    }
    set ::redirects {}
    set res {}
    foreach l [split [string trimright $out "\n"] "\n"] {
        if {[string match "-> Redirected to slot *" $l]} {
            lappend ::redirects $l
        } else {
            lappend res $l
        }
    }
    return $res
}

# Run script while tests/helpers/cluster_traffic.py writes and reads keys
# prefix:0..keys-1 through node 0 with redis-py; the traffic starts before
# and ends after the script.  Returns a dict of the helper's summary (ops
# writes reads errors stale first_ms last_ms final_ok) plus t0/t1, the
# script's start and end, and the redirections redis-py followed (moved ask
# other_retries); fails if the helper saw an error or a stale value.
proc with_traffic {keys prefix script} {
    need_redis_py
    set helper [file join $::harness(testsdir) helpers cluster_traffic.py]
    set ready [tmpfile traffic.ready]
    set stop [tmpfile traffic.stop]
    set out [tmpfile traffic.out]
    set pid [exec $::py $helper --port [cluster_port 0] --keys $keys --prefix $prefix \
                 --seconds 120 --ready-file $ready --stop-file $stop > $out 2>@1 &]
    set deadline [expr {[clock milliseconds] + 60000}]
    while {![file exists $ready]} {
        if {![process_is_alive $pid] || [clock milliseconds] > $deadline} {
            catch {exec kill $pid}
            set text [__read_from__ $out 0]
            file delete $ready $out
            fail "traffic helper did not get ready:\n$text"
        }
        after 50
    }
    after 300
    set t0 [clock milliseconds]
    set rc [catch {uplevel 1 $script} res opts]
    set t1 [clock milliseconds]
    after 300
    close [open $stop w]
    set deadline [expr {[clock milliseconds] + 60000}]
    while {[process_is_alive $pid] && [clock milliseconds] < $deadline} { after 50 }
    if {[process_is_alive $pid]} { catch {exec kill -9 $pid} }
    catch {exec true}
    set text [__read_from__ $out 0]
    file delete $ready $stop $out
    if {$rc} { return -options $opts $res }
    if {![regexp {traffic ops=(\d+) writes=(\d+) reads=(\d+) errors=(\d+) stale=(\d+) first_ms=(\d+) last_ms=(\d+) final_ok=(\d) moved=(\d+) ask=(\d+) other_retries=(\d+)} \
            $text -> ops writes reads errors stale first last final moved ask retries]} {
        fail "traffic helper ended without its summary:\n$text"
    }
    verbose_puts "    [lindex [split [string trim $text] "\n"] 0] (script ran [expr {$t1 - $t0}] ms)"
    if {$errors || $stale || !$final} {
        fail "clients saw errors or stale values while the slots moved:\n$text"
    }
    # redis-py quietly retries TRYAGAIN and lost connections; redis-cli -c
    # and other clients would have shown them as errors (Redis sends
    # neither for single-key commands while slots move).
    if {$retries} {
        fail "redis-py had to retry $retries commands (not MOVED/ASK) while the slots moved:\n$text"
    }
    assert_lessthan $first $t0 ;# traffic started before the change
    assert_morethan $last $t1  ;# and went on until after it
    dict create ops $ops writes $writes reads $reads first_ms $first last_ms $last t0 $t0 t1 $t1 \
        moved $moved ask $ask other_retries $retries
}

tags {cluster} {
test {Tcl CRC16/XMODEM and key slots (reference values)} {
    assert_equal [expr {0x31C3}] [crc16 123456789]
    assert_equal 12739 [key_hash_slot 123456789]
    assert_equal [key_hash_slot user1] [key_hash_slot "{user1}.following"]
    assert_equal [key_hash_slot "a{}b"] [expr {[crc16 "a{}b"] & 16383}]
    assert_equal [key_hash_slot "{}{x}"] [expr {[crc16 "{}{x}"] & 16383}]
    assert_equal [key_hash_slot "x"] [key_hash_slot "a{x}{y}"]
    for {set s 0} {$s < 16384} {incr s 997} {
        assert_equal $s [key_hash_slot [cluster_key_in_slot $s]]
    }
}
}

foreach kind {redis mooncake} {
cluster_block $kind [list nodes 3 timeout $::node_timeout] {

    test "$kind: fresh nodes know only themselves and refuse keys" {
        set ids {}
        foreach i {0 1 2} {
            set info [cluster_info $i]
            assert_equal 1 [dict get $info cluster_known_nodes] "node $i"
            assert_equal 0 [dict get $info cluster_slots_assigned] "node $i"
            assert_equal fail [dict get $info cluster_state] "node $i"
            assert_match "*cluster_enabled:1*" [R $i info cluster]
            set nodes [cluster_nodes $i]
            assert_equal 1 [llength $nodes] "node $i lists [llength $nodes] nodes"
            set me [lindex $nodes 0]
            assert_equal {myself master} [dict get $me flags]
            assert_equal [cluster_port $i] [dict get $me port]
            assert_equal {} [dict get $me slots]
            assert_match {[0-9a-f]*} [dict get $me id]
            assert_equal 40 [string length [dict get $me id]]
            lappend ids [dict get $me id]
            assert_match "CLUSTERDOWN*" [err_of {R $i set somekey v}]
        }
        assert_equal 3 [llength [lsort -unique $ids]] "node ids are distinct"
    }

    test "$kind: redis-cli --cluster create joins 3 nodes" {
        set out [cluster_create]
        assert_match "*Assign a different config epoch to each node*" $out
        assert_contains $out {[OK] All 16384 slots covered.}
        foreach i {0 1 2} {
            assert_equal 3 [cluster_info_field $i cluster_known_nodes] "node $i"
            assert_equal ok [cluster_info_field $i cluster_state] "node $i"
        }
    }

    test "$kind: --cluster check passes through every node, all 16384 slots covered" {
        foreach i {0 1 2} {
            lassign [cluster_check $i] code out
            assert_equal 0 $code "exit status of --cluster check via node $i:\n$out"
            assert {[cluster_check_clean $out]}
            assert_contains $out {[OK] All 16384 slots covered.}
            assert_full_coverage $i
        }
        # Each master got a third of the slots.
        foreach i {0 1 2} { assert_range [cluster_slot_count $i] 5461 5462 }
        # They all agree on who serves what.
        assert_equal [slot_map 0] [slot_map 1]
        assert_equal [slot_map 0] [slot_map 2]
    }

    test "$kind: CLUSTER KEYSLOT is CRC16 of the key or its hash tag" {
        set keys [list "" a foo bar 123456789 "{user1}a" "{user1}b" "a{}b" "{}" "{}x" \
                      "\{a" "a\}" "\}\{a\}" "\{\{a\}\}" "\{a\}\{b\}" "x\{a\}y" "{a}" \
                      "\x00\xff\r\n" "\{\x00\}b" "\{\xff\xfe\}" [string repeat z 1000]]
        for {set i 0} {$i < 300} {incr i} {
            lappend keys "key:$i" [randstring 1 40 binary]
        }
        foreach k $keys {
            assert_equal [key_hash_slot $k] [R 0 cluster keyslot $k] "key '[__show__ $k]'"
        }
        assert_equal 12739 [R 1 cluster keyslot 123456789]
        assert_equal [R 2 cluster keyslot user1] [R 2 cluster keyslot "{user1}a"]
        assert_equal [R 2 cluster keyslot "a{}b"] [expr {[crc16 "a{}b"] & 16383}]
    }

    test "$kind: CLUSTER NODES lines" {
        set re {^([0-9a-f]{40}) 127\.0\.0\.1:(\d+)@(\d+)(,\S*)? (\S+) (-|[0-9a-f]{40}) (\d+) (\d+) (\d+) (connected|disconnected)((?: \d+(?:-\d+)?)*)$}
        set ports [lsort -integer [list [cluster_port 0] [cluster_port 1] [cluster_port 2]]]
        foreach i {0 1 2} {
            set text [R $i cluster nodes]
            assert_equal "\n" [string index $text end] "CLUSTER NODES ends with a newline"
            set lines [split [string trimright $text "\n"] "\n"]
            assert_equal 3 [llength $lines]
            set seen {}
            set myself 0
            set epochs {}
            foreach line $lines {
                if {![regexp $re $line -> id port cport hn flags master ping pong epoch link slots]} {
                    fail "node $i: CLUSTER NODES line not in Redis's format: '$line'"
                }
                lappend seen $port
                assert {$cport > 0 && $cport < 65536}
                assert_equal - $master
                assert_equal connected $link
                assert_morethan $epoch 0
                lappend epochs $epoch
                if {$port == [cluster_port $i]} {
                    assert_equal myself,master $flags
                    incr myself
                    assert_equal [cluster_node_id $i] $id
                } else {
                    assert_equal master $flags
                }
                assert {[llength $slots] >= 1}
            }
            assert_equal 1 $myself
            assert_equal $ports [lsort -integer $seen]
            assert_equal 3 [llength [lsort -unique $epochs]] "config epochs are distinct: $epochs"
        }
    }

    test "$kind: CLUSTER SLOTS" {
        set ids {}
        foreach i {0 1 2} { dict set ids [cluster_port $i] [cluster_node_id $i] }
        foreach i {0 1 2} {
            set total 0
            set reply [R $i cluster slots]
            assert {[llength $reply] >= 3}
            foreach entry $reply {
                assert_equal 3 [llength $entry] "no replicas: '$entry'"
                lassign $entry lo hi master
                assert {[string is integer -strict $lo] && [string is integer -strict $hi] && $lo <= $hi}
                assert {[llength $master] >= 3}
                lassign $master ip port id
                assert_equal 127.0.0.1 $ip
                assert {[dict exists $ids $port]}
                assert_equal [dict get $ids $port] $id
                # The same range as in the owner's CLUSTER NODES.
                assert {[in_ranges $lo [cluster_slot_ranges [cluster_index_of_port $port]]]}
                assert {[in_ranges $hi [cluster_slot_ranges [cluster_index_of_port $port]]]}
                incr total [expr {$hi - $lo + 1}]
            }
            assert_equal 16384 $total
        }
    }

    test "$kind: CLUSTER SHARDS" {
        foreach i {0 1 2} {
            set shards [R $i cluster shards]
            assert_equal 3 [llength $shards]
            set total 0
            set ports {}
            foreach sh $shards {
                assert {[dict exists $sh slots] && [dict exists $sh nodes]}
                set slots [dict get $sh slots]
                assert_equal 0 [expr {[llength $slots] % 2}]
                foreach {lo hi} $slots { incr total [expr {$hi - $lo + 1}] }
                set nodes [dict get $sh nodes]
                assert_equal 1 [llength $nodes]
                set n [lindex $nodes 0]
                foreach f {id port ip endpoint role replication-offset health} {
                    if {![dict exists $n $f]} { fail "shard node without '$f': $n" }
                }
                assert_equal master [dict get $n role]
                assert_equal online [dict get $n health]
                assert_equal 127.0.0.1 [dict get $n ip]
                assert_equal 127.0.0.1 [dict get $n endpoint]
                set idx [cluster_index_of_port [dict get $n port]]
                assert {$idx ne ""}
                assert_equal [cluster_node_id $idx] [dict get $n id]
                foreach {lo hi} $slots {
                    assert {[in_ranges $lo [cluster_slot_ranges $idx]] && [in_ranges $hi [cluster_slot_ranges $idx]]}
                }
                lappend ports [dict get $n port]
            }
            assert_equal 16384 $total
            assert_equal 3 [llength [lsort -unique $ports]]
        }
    }

    test "$kind: CLUSTER INFO fields" {
        set mine {}
        foreach i {0 1 2} {
            set info [cluster_info $i]
            assert_equal ok [dict get $info cluster_state]
            assert_equal 16384 [dict get $info cluster_slots_assigned]
            assert_equal 16384 [dict get $info cluster_slots_ok]
            assert_equal 0 [dict get $info cluster_slots_pfail]
            assert_equal 0 [dict get $info cluster_slots_fail]
            assert_equal 3 [dict get $info cluster_known_nodes]
            assert_equal 3 [dict get $info cluster_size]
            set cur [dict get $info cluster_current_epoch]
            set my [dict get $info cluster_my_epoch]
            assert_morethan $my 0
            assert_lessthan_equal $my $cur
            assert_equal [dict get [cluster_myself $i] epoch] $my
            lappend mine $my
        }
        assert_equal 3 [llength [lsort -unique $mine]]
    }

    test "$kind: INFO cluster says cluster_enabled:1" {
        foreach i {0 1 2} {
            assert_equal 1 [get_info_field [cluster_client $i] cluster cluster_enabled]
            assert_match "*cluster_enabled:1*" [R $i info]
        }
    }

    test "$kind: a key sent to the wrong node gets MOVED to its owner" {
        set ranges {}
        foreach i {0 1 2} { lappend ranges [cluster_slot_ranges $i] }
        for {set k 0} {$k < 60} {incr k} {
            set key "moved:$k"
            set slot [key_hash_slot $key]
            set owner -1
            foreach i {0 1 2} { if {[in_ranges $slot [lindex $ranges $i]]} { set owner $i } }
            assert {$owner >= 0}
            assert_equal OK [R $owner set $key v$k]
            assert_equal v$k [R $owner get $key]
            foreach i {0 1 2} {
                if {$i == $owner} continue
                assert_equal "MOVED $slot 127.0.0.1:[cluster_port $owner]" [err_of {R $i get $key}]
                assert_equal "MOVED $slot 127.0.0.1:[cluster_port $owner]" [err_of {R $i set $key x}]
            }
        }
    }

    test "$kind: redis-cli -c sets and gets keys across all nodes" {
        set set_lines {}
        set get_lines {}
        set want {}
        for {set k 0} {$k < 40} {incr k} {
            lappend set_lines "set cli:$k value$k"
            lappend get_lines "get cli:$k"
            lappend want value$k
        }
        assert_equal [lrepeat 40 OK] [cli_pipe [cluster_port 0] $set_lines -c]
        assert_morethan [llength $::redirects] 0
        foreach i {0 1 2} {
            assert_equal $want [cli_pipe [cluster_port $i] $get_lines -c] "gets via node $i"
        }
        # They are spread over the masters, each on its owner.
        set per {0 0 0}
        for {set k 0} {$k < 40} {incr k} {
            set o [cluster_slot_owner [key_hash_slot cli:$k]]
            assert_equal value$k [R $o get cli:$k]
            lset per $o [expr {[lindex $per $o] + 1}]
        }
        foreach n $per { assert_morethan $n 0 }
    }

    test "$kind: multi-key commands: CROSSSLOT across slots, OK within a hash tag" {
        set a "cross:a"
        set b "cross:b"
        assert_not_equal [key_hash_slot $a] [key_hash_slot $b]
        set o [cluster_slot_owner [key_hash_slot $a]]
        foreach cmd [list [list mset $a 1 $b 2] [list mget $a $b] [list del $a $b] [list exists $a $b] \
                         [list msetnx $a 1 $b 2] [list rename $a $b] [list renamenx $a $b] [list copy $a $b] \
                         [list lcs $a $b] [list touch $a $b]] {
            assert_match "CROSSSLOT*" [err_of {R $o {*}$cmd}] "$cmd"
        }
        set t [cluster_slot_owner [key_hash_slot "{tag}"]]
        assert_equal OK [R $t mset "{tag}a" 1 "{tag}b" 2 "{tag}c" 3]
        assert_equal {1 2 3 {}} [R $t mget "{tag}a" "{tag}b" "{tag}c" "{tag}d"]
        assert_equal 2 [R $t exists "{tag}a" "{tag}b"]
        R $t del "{tag}e" "{tag}f"
        assert_equal 1 [R $t copy "{tag}c" "{tag}e"]
        assert_equal OK [R $t rename "{tag}e" "{tag}f"]
        assert_equal 3 [R $t lcs "{tag}c" "{tag}f"]
        assert_equal 2 [R $t touch "{tag}a" "{tag}f"]
        assert_equal 2 [R $t del "{tag}a" "{tag}b"]
        set other [expr {($t + 1) % 3}]
        assert_match "MOVED [key_hash_slot tag] *" [err_of {R $other mget "{tag}a" "{tag}c"}]
    }

    test "$kind: transactions: MOVED while queueing aborts, CROSSSLOT at EXEC, one slot runs" {
        set r [lindex [cluster_slot_ranges 0] 0]
        set k1 [cluster_key_in_slot [lindex $r 0] txc]
        set k2 [cluster_key_in_slot [expr {[lindex $r 0] + 1}] txc]
        # Each key alone is served by node 0; together they are two slots.
        R 0 del $k1
        assert_equal OK [R 0 multi]
        assert_equal QUEUED [R 0 set $k1 1]
        assert_equal QUEUED [R 0 set $k2 2]
        assert_match "CROSSSLOT*" [err_of {R 0 exec}]
        assert_match "*EXEC without MULTI*" [err_of {R 0 exec}]
        assert_equal 0 [R 0 exists $k1]
        # A key of another node is redirected while queueing: EXECABORT.
        set far [cluster_key_for_node 1 txc]
        R 0 multi
        R 0 set $k1 1
        assert_match "MOVED *" [err_of {R 0 set $far 1}]
        assert_match "EXECABORT*" [err_of {R 0 exec}]
        assert_equal 0 [R 0 exists $k1]
        # Keys of one slot (a hash tag) run.
        set t [cluster_slot_owner [key_hash_slot "{txtag}"]]
        R $t multi
        R $t set "{txtag}a" 1
        R $t set "{txtag}b" 2
        R $t mget "{txtag}a" "{txtag}b"
        assert_equal {OK OK {1 2}} [R $t exec]
        R $t del "{txtag}a" "{txtag}b"
    }

    test "$kind: COUNTKEYSINSLOT and GETKEYSINSLOT" {
        set slot 4242
        set o [cluster_slot_owner $slot]
        set base [cluster_key_in_slot $slot ck]
        set keys {}
        for {set k 0} {$k < 7} {incr k} {
            lappend keys "$base:$k"
            assert_equal OK [R $o set "$base:$k" $k]
        }
        assert_equal 7 [R $o cluster countkeysinslot $slot]
        assert_equal [lsort $keys] [lsort [R $o cluster getkeysinslot $slot 100]]
        set some [R $o cluster getkeysinslot $slot 3]
        assert_equal 3 [llength $some]
        foreach k $some { assert {$k in $keys} }
        set empty [expr {$slot + 1}]
        assert_equal 0 [R [cluster_slot_owner $empty] cluster countkeysinslot $empty]
        assert_equal {} [R [cluster_slot_owner $empty] cluster getkeysinslot $empty 10]
        assert_match "ERR*" [err_of {R $o cluster countkeysinslot 16384}]
        assert_match "ERR*" [err_of {R $o cluster getkeysinslot $slot -1}]
        assert_match "ERR*" [err_of {R $o cluster getkeysinslot 16384 1}]
        # A word that is not a number is Redis's integer error, a number out
        # of range its slot error (redis-server 7 answers so).
        assert_equal "ERR value is not an integer or out of range" [err_of {R $o cluster countkeysinslot abc}]
        assert_equal "ERR Invalid slot" [err_of {R $o cluster countkeysinslot 16384}]
        assert_equal "ERR value is not an integer or out of range" [err_of {R $o cluster getkeysinslot $slot x}]
        assert_equal "ERR Invalid slot or number of keys" [err_of {R $o cluster getkeysinslot -1 1}]
        if {$kind eq "mooncake"} {
            # A user restricted by key patterns is shown only its keys (Redis shows all).
            R $o acl setuser gk on >p "~$base:1" "~$base:2" +@all
            set c [cluster_client $o]
            $c auth gk p
            assert_equal [lsort [list $base:1 $base:2]] [lsort [$c cluster getkeysinslot $slot 100]]
            assert_equal 1 [llength [$c cluster getkeysinslot $slot 1]]
            # ... and counts only its keys too (tenants_hidden.tcl).
            assert_equal 2 [$c cluster countkeysinslot $slot]
            $c close
            R $o acl deluser gk
        }
        R $o del {*}$keys
    }

    test "$kind: ASK while a slot migrates by hand (SETSLOT IMPORTING/MIGRATING)" {
        set src 0
        set dst 1
        set slot [lindex [lindex [cluster_slot_ranges $src] 0] 0]
        set ::ask_slot $slot
        set tag [cluster_key_in_slot $slot ask]
        set here "$tag:here"
        set gone "$tag:gone"
        assert_equal OK [R $src set $here v1]
        for {set k 0} {$k < 5} {incr k} { assert_equal OK [R $src set "$tag:more$k" m$k] }
        set srcid [cluster_node_id $src]
        set dstid [cluster_node_id $dst]
        assert_equal OK [R $dst cluster setslot $slot importing $srcid]
        assert_equal OK [R $src cluster setslot $slot migrating $dstid]
        assert_contains [dict get [cluster_myself $src] line] "\[$slot->-$dstid\]"
        assert_contains [dict get [cluster_myself $dst] line] "\[$slot-<-$srcid\]"
        lassign [cluster_check $src] code out
        assert_contains $out {[WARNING]}
        assert_equal 1 $code "--cluster check fails with an open slot"
        assert {[regexp "open: $slot\\.|state $slot\\." $out]}
        # The source still serves what it has; a missing key is asked for
        # on the target.
        assert_equal v1 [R $src get $here]
        set ask "ASK $slot 127.0.0.1:[cluster_port $dst]"
        assert_equal $ask [err_of {R $src get $gone}]
        assert_equal $ask [err_of {R $src set $gone x}]
        # The target answers MOVED (to the source) unless asked with ASKING,
        # which covers one command only.
        assert_equal "MOVED $slot 127.0.0.1:[cluster_port $src]" [err_of {R $dst get $gone}]
        set c [cluster_client $dst]
        assert_equal OK [$c asking]
        assert_equal {} [$c get $gone]
        assert_equal OK [$c asking]
        assert_equal OK [$c set $gone v2]
        assert_equal "MOVED $slot 127.0.0.1:[cluster_port $src]" [err_of {$c get $gone}]
        $c close
        assert_equal 1 [R $dst cluster countkeysinslot $slot]
        assert_equal 6 [R $src cluster countkeysinslot $slot]
        # redis-cli -c follows ASK (sending ASKING) to the target.
        assert_equal {v2 v1} [cli_pipe [cluster_port 2] [list "get $gone" "get $here"] -c]
        assert_contains $::redirects "Redirected to slot \[$slot\] located at 127.0.0.1:[cluster_port $dst]"
    }

    test "$kind: MIGRATE the keys, then SETSLOT NODE on both ends" {
        set slot $::ask_slot
        set src 0
        set dst 1
        set tag [cluster_key_in_slot $slot ask]
        set here "$tag:here"
        set more {}
        for {set k 0} {$k < 5} {incr k} { lappend more "$tag:more$k" }
        assert_equal m4 [R $src get "$tag:more4"]
        set dport [cluster_port $dst]
        if {$kind eq "mooncake"} {
            # A tenant's count (tenantkeys.c) follows its keys across nodes.
            foreach n [list $src $dst] { R $n acl setuser mig on >p "~$tag:*" +@all }
            set onsrc [llength [R $src keys "$tag:*"]]
            assert {$onsrc >= 6}
            set tc [cluster_client $src]
            $tc auth mig p
            assert_equal $onsrc [$tc dbsize]
            $tc close
        }
        assert_equal NOKEY [R $src migrate 127.0.0.1 $dport "" 0 5000 keys "$tag:nosuchkey"]
        assert_equal OK [R $src migrate 127.0.0.1 $dport $here 0 5000]
        assert_equal OK [R $src migrate 127.0.0.1 $dport "" 0 5000 keys {*}$more]
        assert_equal 0 [R $src cluster countkeysinslot $slot]
        assert_equal 7 [R $dst cluster countkeysinslot $slot]
        if {$kind eq "mooncake"} {
            foreach n [list $src $dst] want [list 0 [llength [R $dst keys "$tag:*"]]] {
                set tc [cluster_client $n]
                $tc auth mig p
                assert_equal $want [$tc dbsize]
                $tc close
                R $n acl deluser mig
            }
        }
        assert_equal "ASK $slot 127.0.0.1:$dport" [err_of {R $src get $here}]
        set c [cluster_client $dst]
        $c asking
        assert_equal v1 [$c get $here]
        $c close
        set dstid [cluster_node_id $dst]
        assert_equal OK [R $dst cluster setslot $slot node $dstid]
        assert_equal OK [R $src cluster setslot $slot node $dstid]
        assert_equal OK [R 2 cluster setslot $slot node $dstid]
        assert_equal "MOVED $slot 127.0.0.1:$dport" [err_of {R $src get $here}]
        assert_equal "MOVED $slot 127.0.0.1:$dport" [err_of {R 2 get $here}]
        assert_equal v1 [R $dst get $here]
        assert_equal m4 [R $dst get "$tag:more4"]
        assert {[in_ranges $slot [cluster_slot_ranges $dst]]}
        assert {![in_ranges $slot [cluster_slot_ranges $src]]}
        cluster_wait_ok
        foreach i {0 1 2} { assert_equal $dst [cluster_slot_owner $slot $i] "as node $i sees it" }
        assert_equal 16384 [expr {[cluster_slot_count 0] + [cluster_slot_count 1] + [cluster_slot_count 2]}]
    }

    test "$kind: --cluster reshard moves slots while clients keep reading and writing" {
        cluster_settle {0 1 2}
        set before0 [cluster_slot_ranges 0]
        set n0 [cluster_slot_count 0]
        set n1 [cluster_slot_count 1]
        set id0 [cluster_node_id 0]
        set id1 [cluster_node_id 1]
        set t [with_traffic 2000 traffic {
            set out [cluster_cli --cluster reshard [cluster_addr 0] --cluster-from $id0 \
                         --cluster-to $id1 --cluster-slots 300 --cluster-yes]
        }]
        assert_equal [expr {$n0 - 300}] [cluster_slot_count 0]
        assert_equal [expr {$n1 + 300}] [cluster_slot_count 1]
        # Which of the traffic keys were in the slots that moved: they must
        # have gone with them.
        set after0 [cluster_slot_ranges 0]
        set moved 0
        for {set k 0} {$k < 2000} {incr k} {
            set s [key_hash_slot traffic:$k]
            if {[in_ranges $s $before0] && ![in_ranges $s $after0]} {
                incr moved
                assert_equal 1 [R 1 exists traffic:$k] "traffic:$k moved with slot $s"
            }
        }
        assert_morethan $moved 10
        assert_morethan [dict get $t moved] 0 ;# the client was sent on by MOVED
        verbose_puts "    $moved traffic keys were in moved slots; [dict get $t ops] ops during the run"
        cluster_wait_ok
    }

    test "$kind: --cluster rebalance evens the slots out under traffic" {
        cluster_settle {0 1 2}
        set counts [list [cluster_slot_count 0] [cluster_slot_count 1] [cluster_slot_count 2]]
        assert_morethan_equal [expr {[lindex $counts 1] - [lindex $counts 0]}] 300 ;# unbalanced before
        with_traffic 1000 rebal {
            set out [cluster_cli --cluster rebalance [cluster_addr 0]]
        }
        assert_match "*Rebalancing across 3 nodes*" $out
        foreach i {0 1 2} { assert_range [cluster_slot_count $i] 5460 5463 }
        cluster_wait_ok
        lassign [cluster_cli_rc --cluster rebalance [cluster_addr 0]] code out
        assert_equal 0 $code
        assert_match "*No rebalancing needed*" $out
    }

    test "$kind: add-node joins an empty 4th node, reshard gives it slots and keys" {
        cluster_settle {0 1 2}
        set i3 [cluster_start_nodes 1]
        assert_equal 3 $i3
        assert_equal 1 [cluster_info_field 3 cluster_known_nodes]
        set lines {}
        for {set k 0} {$k < 1000} {incr k} { lappend lines "set add:$k a$k" }
        assert_equal [lrepeat 1000 OK] [cli_pipe [cluster_port 0] $lines -c]
        set out [cluster_cli --cluster add-node [cluster_addr 3] [cluster_addr 0]]
        assert_contains $out {[OK] New node added correctly.}
        wait_for_condition 100 100 {
            [cluster_info_field 0 cluster_known_nodes] == 4 && [cluster_info_field 1 cluster_known_nodes] == 4 &&
            [cluster_info_field 2 cluster_known_nodes] == 4 && [cluster_info_field 3 cluster_known_nodes] == 4
        } else {
            fail "not every node knows 4 nodes: [R 3 cluster nodes]"
        }
        cluster_wait_ok {0 1 2 3}
        assert_equal 0 [cluster_slot_count 3]
        set id3 [cluster_node_id 3]
        cluster_cli --cluster reshard [cluster_addr 0] --cluster-from all --cluster-to $id3 \
            --cluster-slots 120 --cluster-yes
        # redis-cli shares the 120 out in proportion, rounding all but the
        # first source's share down: up to one slot less per extra source.
        assert_range [cluster_slot_count 3] 118 120
        cluster_wait_ok {0 1 2 3}
        set mine [cluster_slot_ranges 3]
        set n 0
        for {set k 0} {$k < 1000} {incr k} {
            if {[in_ranges [key_hash_slot add:$k] $mine]} {
                incr n
                assert_equal a$k [R 3 get add:$k]
            }
        }
        assert_morethan $n 0
        # The keys moved with their slots: node 3 holds all of its slots'
        # keys and nothing else, the others none of them.
        set sum 0
        foreach r $mine {
            for {set s [lindex $r 0]} {$s <= [lindex $r 1]} {incr s} {
                incr sum [R 3 cluster countkeysinslot $s]
                foreach i {0 1 2} { assert_equal 0 [R $i cluster countkeysinslot $s] "slot $s on node $i" }
            }
        }
        assert_equal $sum [R 3 dbsize]
        assert_equal 4 [cluster_info_field 0 cluster_size]
    }

    test "$kind: del-node after moving its slots away" {
        set id3 [cluster_node_id 3]
        set id0 [cluster_node_id 0]
        set n3 [cluster_slot_count 3]
        assert_morethan $n3 0 ;# given by the add-node test
        cluster_cli --cluster reshard [cluster_addr 0] --cluster-from $id3 --cluster-to $id0 \
            --cluster-slots $n3 --cluster-yes
        assert_equal 0 [cluster_slot_count 3]
        assert_equal 0 [R 3 dbsize]
        set out [cluster_cli --cluster del-node [cluster_addr 0] $id3]
        assert_match "*Sending CLUSTER FORGET messages to the cluster*" $out
        wait_for_condition 100 100 {
            [cluster_info_field 0 cluster_known_nodes] == 3 && [cluster_info_field 1 cluster_known_nodes] == 3 &&
            [cluster_info_field 2 cluster_known_nodes] == 3
        } else {
            fail "node 3 still known: [R 0 cluster nodes]"
        }
        foreach i {0 1 2} { assert_no_match "*$id3*" [R $i cluster nodes] }
        cluster_stop_node 3
        cluster_wait_ok {0 1 2}
        set lines {}
        set want {}
        for {set k 0} {$k < 1000} {incr k} { lappend lines "get add:$k"; lappend want a$k }
        assert_equal $want [cli_pipe [cluster_port 1] $lines -c]
    }

    test "$kind: redis-py RedisCluster round trips" {
        cluster_settle {0 1 2}
        need_redis_py
        set script [file join $::harness(testsdir) helpers redis_py_cluster_check.py]
        set ports [join [list [cluster_port 0] [cluster_port 1] [cluster_port 2]] ,]
        set rc [catch {exec {*}$::cluster(timeout_cmd) $::py $script 127.0.0.1 [cluster_port 1] $ports 2>@1} out]
        if {$rc || ![string match "*ALL OK*" $out]} {
            fail "redis-py cluster check failed:\n$out"
        }
        verbose_puts [lindex [split $out "\n"] 0]
    }

    test "$kind: redis-benchmark --cluster" {
        cluster_settle {0 1 2}
        if {$::bench eq ""} { skip "redis-benchmark is not installed" }
        foreach i {0 1 2} { R $i flushall }
        set rc [catch {exec {*}$::cluster(timeout_cmd) $::bench -h 127.0.0.1 -p [cluster_port 0] \
                           --cluster -n 2000 -t set,get -q 2>@1} out]
        assert_equal 0 $rc "redis-benchmark: $out"
        assert_match "*Cluster has 3 master nodes*" $out
        foreach cmd {SET GET} {
            if {![regexp "$cmd: (\[0-9.\]+) requests per second" $out -> rps]} {
                fail "no $cmd result in: $out"
            }
            assert_morethan $rps 0
        }
        assert_no_match "*rror*" $out
        # Every master got its share of the keys.
        foreach i {0 1 2} { assert_morethan [R $i dbsize] 0 }
    }

    test "$kind: a node killed with kill -9 is flagged fail, and comes back the same" {
        cluster_settle {0 1 2}
        set victim 2
        set vid [cluster_node_id $victim]
        set vranges [cluster_slot_ranges $victim]
        set vcount [cluster_slot_count $victim]
        set vkey [cluster_key_for_node $victim kill]
        set vslot [key_hash_slot $vkey]
        assert_equal OK [R $victim set $vkey before]
        set t0 [clock milliseconds]
        cluster_kill_node $victim
        set limit [expr {2 * $::node_timeout + 2000}]
        while {[clock milliseconds] - $t0 < 4 * $::node_timeout + 5000} {
            set flagged {}
            foreach i {0 1} {
                if {"fail" in [node_flags $i $vid]} { lappend flagged $i }
            }
            if {[llength $flagged] == 2} break
            after 50
        }
        set took [expr {[clock milliseconds] - $t0}]
        verbose_puts "    flagged fail after $took ms (node timeout $::node_timeout ms)"
        assert_equal {0 1} $flagged "nodes flagging $vid fail after $took ms"
        assert_lessthan_equal $took $limit
        foreach i {0 1} {
            wait_for_condition 50 100 {[cluster_info_field $i cluster_state] eq "fail"} else {
                fail "node $i: cluster_state [cluster_info_field $i cluster_state] with a master down"
            }
            assert_equal $vcount [cluster_info_field $i cluster_slots_fail]
            assert_match "CLUSTERDOWN*" [err_of {R $i get $vkey}]
        }
        set t1 [clock milliseconds]
        cluster_restart_node $victim
        wait_for_condition 200 50 {
            [cluster_info_field 0 cluster_state] eq "ok" && [cluster_info_field 1 cluster_state] eq "ok" &&
            [cluster_info_field 2 cluster_state] eq "ok"
        } else {
            fail "cluster_state not ok again after the restart: [cluster_info 0]"
        }
        verbose_puts "    ok again [expr {[clock milliseconds] - $t1}] ms after the restart"
        assert_equal $vid [cluster_node_id $victim]
        assert_equal $vranges [cluster_slot_ranges $victim]
        foreach i {0 1} { assert_equal master [node_flags $i $vid] }
        cluster_wait_ok {0 1 2}
        assert_equal "MOVED $vslot 127.0.0.1:[cluster_port $victim]" [err_of {R 0 get $vkey}]
        assert_equal OK [R $victim set $vkey after]
        assert_equal after [R $victim get $vkey]
    }

    test "$kind: every node restarted keeps its id and the slot map" {
        cluster_settle {0 1 2}
        set map [slot_map 0]
        set ids {}
        foreach i {0 1 2} { lappend ids [cluster_node_id $i] }
        foreach i {0 1 2} { cluster_stop_node $i }
        foreach i {0 1 2} {
            assert {[file exists [file join [cluster_dir $i] nodes-[cluster_port $i].conf]]}
            cluster_restart_node $i
        }
        cluster_wait_ok {0 1 2}
        set now {}
        foreach i {0 1 2} { lappend now [cluster_node_id $i] }
        assert_equal $ids $now
        foreach i {0 1 2} { assert_equal $map [slot_map $i] "as node $i sees it" }
    }

    if {$kind eq "mooncake"} {
    tags {mooncake} {

    test "$kind: store commands are routed by MOVED" {
        cluster_settle {0 1 2}
        set o 1
        set key [cluster_key_for_node $o store]
        set slot [key_hash_slot $key]
        set moved "MOVED $slot 127.0.0.1:[cluster_port $o]"
        foreach i {0 2} {
            assert_equal $moved [err_of {R $i put.start $key 11}]
            assert_equal $moved [err_of {R $i put.end $key}]
            assert_equal $moved [err_of {R $i get.replicas $key}]
            assert_equal $moved [err_of {R $i object.info $key}]
            assert_equal $moved [err_of {R $i remove $key}]
        }
        set reps [R $o put.start $key 11]
        lassign [lindex $reps 0] seg off len
        assert_equal 11 $len
        assert_equal OK [R $o seg.write $seg $off "hello world"]
        assert_equal OK [R $o put.end $key]
        set gr [R $o get.replicas $key]
        assert_equal 11 [lindex $gr 1]
        assert_equal "hello world" [R $o get $key]
        set other [cluster_key_for_node 2 store]
        assert_match "CROSSSLOT*" [err_of {R $o batch.put.start 2 $key 10 $other 10}]
        # redis-cli -c follows MOVED for them too.
        set k2 [cluster_key_for_node 2 store2]
        set out [cli_pipe [cluster_port 0] [list "put.start $k2 5" "put.end $k2" "object.info $k2"] -c]
        assert_match "*OK*" $out
        assert_equal 5 [dict get [R 2 object.info $k2] size]
        # redis-py finds their keys from COMMAND.
        need_redis_py
        set script [file join $::harness(testsdir) helpers redis_py_cluster_check.py]
        set ports [join [list [cluster_port 0] [cluster_port 1] [cluster_port 2]] ,]
        set rc [catch {exec {*}$::cluster(timeout_cmd) $::py $script 127.0.0.1 [cluster_port 0] $ports --store 2>@1} out]
        if {$rc || ![string match "*ALL OK*" $out]} {
            fail "redis-py cluster check (store) failed:\n$out"
        }
    }

    test "$kind: nodes keep serving their slots while etcd is down, and recover with it" {
        cluster_settle {0 1 2}
        set map [slot_map 0]
        set keys {}
        foreach i {0 1 2} {
            set k [cluster_key_for_node $i etcddown]
            lappend keys $k
            assert_equal OK [R $i set $k before]
        }
        etcd_stop
        set until [expr {[clock milliseconds] + 2 * $::node_timeout + 1000}]
        set rounds 0
        while {[clock milliseconds] < $until} {
            foreach i {0 1 2} {
                set k [lindex $keys $i]
                assert_equal OK [R $i set $k during$rounds]
                assert_equal during$rounds [R $i get $k]
                set j [expr {($i + 1) % 3}]
                assert_match "MOVED * 127.0.0.1:[cluster_port $i]" [err_of {R $j get $k}]
            }
            incr rounds
            after 250
        }
        foreach i {0 1 2} {
            foreach n [cluster_nodes $i] {
                if {[string match "*fail*" [dict get $n flags]]} {
                    fail "node $i flags [dict get $n id] [dict get $n flags] while etcd is down"
                }
            }
        }
        etcd_restart
        cluster_wait_ok {0 1 2}
        # Leases renewed: nobody is flagged after longer than a timeout.
        after [expr {2 * $::node_timeout}]
        foreach i {0 1 2} {
            assert_equal ok [cluster_info_field $i cluster_state]
            assert_equal $map [slot_map $i]
            foreach n [cluster_nodes $i] { assert_no_match "*fail*" [dict get $n flags] }
        }
        # Failure detection works again.
        set vid [cluster_node_id 2]
        cluster_kill_node 2
        wait_for_condition [expr {(4 * $::node_timeout + 5000) / 50}] 50 {
            "fail" in [node_flags 0 $vid] && "fail" in [node_flags 1 $vid]
        } else {
            fail "node 2 not flagged fail after etcd came back: [R 0 cluster nodes]"
        }
        cluster_restart_node 2
        cluster_wait_ok {0 1 2}
        assert_equal $vid [cluster_node_id 2]
    }

    }
    }

    test "$kind: utils/create-cluster start, create, stop, clean" {
        set script [file join $::harness(root) utils create-cluster]
        set base [cluster_free_ports 3]
        set dir [tmpfile create-cluster]
        set envs [list KIND=$kind NODES=3 PORT=$base TIMEOUT=$::node_timeout DIR=$dir \
                     BIN=$::harness(binary) NAME=cc-[pid] \
                     ETCD_PORT=[find_available_port] ETCD_PEER_PORT=[find_available_port]]
        set run [list {*}$::cluster(timeout_cmd) env {*}$envs $script]
        set pidfiles {}
        foreach k {0 1 2} { lappend pidfiles [file join $dir [expr {$base + $k}] pid] }
        if {$kind eq "mooncake"} { lappend pidfiles [file join $dir etcd etcd.pid] }
        set pids {}
        set rc [catch {
            set out [exec {*}$run start < /dev/null 2>@1]
            foreach pf $pidfiles {
                assert {[file exists $pf]}
                set f [open $pf]
                lappend pids [string trim [read $f]]
                close $f
                cluster_track_pid [lindex $pids end]
                assert {[process_is_alive [lindex $pids end]]}
            }
            foreach k {0 1 2} { assert_match "*node [expr {$base + $k}] started*" $out }
            if {$kind eq "mooncake"} { assert_match "*starting etcd on http://127.0.0.1:*" $out }
            set out [exec {*}$run create < /dev/null 2>@1]
            assert_contains $out {[OK] All 16384 slots covered.}
            assert_match "*cluster ready: redis-cli -c -p $base*" $out
            lassign [cluster_cli_rc --cluster check 127.0.0.1:$base] code out
            assert_equal 0 $code $out
            assert {[cluster_check_clean $out]}
            assert_equal {OK hello} [cli_pipe $base {"set cc:key hello" "get cc:key"} -c]
            # A second start finds everything running and starts nothing.
            set out [exec {*}$run start < /dev/null 2>@1]
            assert_match "*node $base already running*" $out
            set out [exec {*}$run status < /dev/null 2>@1]
            assert_match "*node $base: running*" $out
            set out [exec {*}$run stop < /dev/null 2>@1]
            assert_match "*[llength $pidfiles] processes stopped*" $out
            catch {exec true}
            foreach p $pids { assert {![process_is_alive $p]} }
            exec {*}$run clean < /dev/null 2>@1
            assert {![file exists $dir]}
        } err opts]
        if {$rc} { catch {exec {*}$run stop < /dev/null 2>@1} }
        foreach p $pids { cluster_untrack_pid $p }
        if {$rc} { return -options $opts $err }
    }
}
}

tags {cluster} {
    test {utils/create-cluster fails clearly without its programs} {
        set script [file join $::harness(root) utils create-cluster]
        set dir [tmpfile create-cluster]
        set rc [catch {exec env BIN=/nonexistent/mooncake-server DIR=$dir PORT=[cluster_free_ports 3] $script start < /dev/null 2>@1} out]
        assert_equal 1 $rc
        assert_match "*no server binary at /nonexistent/mooncake-server*" $out
        set rc [catch {exec env ETCD=/nonexistent/etcd BIN=/bin/sh DIR=$dir PORT=[cluster_free_ports 3] $script start < /dev/null 2>@1} out]
        assert_equal 1 $rc
        assert_match "*etcd not found*" $out
        set rc [catch {exec env KIND=other $script start < /dev/null 2>@1} out]
        assert_equal 1 $rc
        assert_match "*KIND must be mooncake or redis*" $out
        set out [exec $script help]
        assert_match "*start*create*stop*" $out
        file delete -force $dir
    }
}
