# Cluster mode and the store: what only our nodes have to get right.
#
# Store objects (PUT.START / SEG.WRITE / PUT.END) resharded by redis-cli
# --cluster reshard must arrive byte-exact with their metadata; a put
# pending while its slot moves must never be published half-written on
# either side; a read lease taken before a move keeps the old bytes
# readable; topology changes wait for etcd and say so when it is gone;
# what etcd holds is input like any other (a malformed record is ignored);
# the CLUSTER errors are Redis's; PUBLISH stays on its node while shard
# channels follow their slot. Needs etcd (skipped with the reason if
# missing) and runs against one 3-node cluster (support/cluster.tcl).

source [file join $::harness(testsdir) support cluster.tcl]

proc cs_err {script} {
    if {[catch {uplevel 1 $script} e]} { return $e }
    return ""
}

# Deterministic bytes of a given length, different per seed.
proc cs_bytes {seed len} {
    set unit [binary format I* [list $seed [expr {$seed * 7919}] 0xdeadbeef [expr {$seed ^ 0x5a5a5a5a}]]]
    set s [string repeat $unit [expr {$len / 16 + 1}]]
    return [string range $s 0 [expr {$len - 1}]]
}

# A store put on node i: every replica written, then published with a
# checksum the test can find again.
proc cs_put {i key data {opts {}}} {
    set reps [R $i put.start $key [string length $data] {*}$opts]
    foreach rep $reps {
        lassign $rep seg off len
        assert_equal OK [R $i seg.write $seg $off $data]
    }
    assert_equal OK [R $i put.end $key checksum "sum-[string length $data]"]
}

# The bytes of key as node i's first replica holds them.
proc cs_read {i key} {
    set gr [R $i get.replicas $key]
    if {$gr eq ""} { return "<missing>" }
    lassign [lindex $gr 3] seg off len
    return [R $i seg.read $seg $off $len]
}

# The group of node i's record, read from etcd: records written into it
# would be part of the cluster if they were accepted.
proc cs_group_of {i} {
    set key "/mooncake/$::cluster(name)/nodes/[cluster_node_id $i]"
    set body [format {{"key":"%s"}} [binary encode base64 $key]]
    set out [exec curl -s -X POST [etcd_endpoint]/v3/kv/range -d $body]
    if {![regexp {"value":"([^"]+)"} $out -> v]} { fail "no record for node $i in etcd: $out" }
    if {![regexp {"group":"([0-9a-f]{40})"} [binary decode base64 $v] -> g]} { fail "no group in record" }
    return $g
}

# {id ranges} of every node as node via sees it, sorted.
proc cs_slot_map {via} {
    lsort -index 0 [lmap n [cluster_nodes $via] {list [dict get $n id] [cluster_ranges_of [dict get $n slots]]}]
}

proc cs_etcd_put {key value} {
    set body [format {{"key":"%s","value":"%s"}} [binary encode base64 $key] [binary encode base64 $value]]
    exec curl -s -X POST [etcd_endpoint]/v3/kv/put -d $body
}

cluster_block mooncake {nodes 3 timeout 2000} {

    test "store objects move byte-exact, with checksum and pins, when redis-cli reshards their slots" {
        cluster_create
        # Objects in the first slots of node 0, which a reshard of 64 slots
        # from it moves (checked below, so a different choice fails here).
        set first [lindex [lindex [cluster_slot_ranges 0] 0] 0]
        set objs {}
        set sizes {1 100 4096 65537 1048576}
        for {set n 0} {$n < 20} {incr n} {
            set slot [expr {$first + $n % 10}]
            set key [cluster_key_in_slot $slot obj$n]
            set data [cs_bytes $n [lindex $sizes [expr {$n % [llength $sizes]}]]]
            set opts [expr {$n % 3 == 0 ? {hardpin} : {}}]
            cs_put 0 $key $data $opts
            if {$n % 3 == 1} { assert_equal OK [R 0 pin $key 600000] }
            lappend objs $key $data
        }
        set before [R 1 dbsize]
        cluster_cli --cluster reshard [cluster_addr 0] --cluster-from [cluster_node_id 0] \
            --cluster-to [cluster_node_id 1] --cluster-slots 64 --cluster-yes
        cluster_wait_ok
        assert_equal [expr {$before + 20}] [R 1 dbsize]
        set n 0
        foreach {key data} $objs {
            assert_equal 1 [cluster_slot_owner [key_hash_slot $key]]
            assert_match "MOVED *:[cluster_port 1]" [cs_err {R 0 get.replicas $key}]
            set got [cs_read 1 $key]
            if {$got ne $data} { fail "$key: [string length $got] bytes back, want [string length $data], or different bytes" }
            set info [R 1 object.info $key]
            assert_equal complete [dict get $info state]
            assert_equal "sum-[string length $data]" [dict get $info checksum]
            if {$n % 3 == 0} { assert_equal hard [dict get $info pin] }
            if {$n % 3 == 1} { assert_equal soft [dict get $info pin] }
            incr n
        }
    }

    test "a put pending while its slot moves away is never published there: PUT.END gets MOVED, redone on the new owner" {
        cluster_settle {0 1 2}
        set slot [lindex [lindex [cluster_slot_ranges 0] 0] 0]
        set key [cluster_key_in_slot $slot pending]
        set data [cs_bytes 42 5000]
        set reps [R 0 put.start $key 5000]
        lassign [lindex $reps 0] seg off len
        assert_equal OK [R 0 seg.write $seg $off [string range $data 0 2499]]
        # Move the slot by hand, as redis-cli does, while the put is open.
        set src [cluster_node_id 0]
        set dst [cluster_node_id 1]
        assert_equal OK [R 1 cluster setslot $slot importing $src]
        assert_equal OK [R 0 cluster setslot $slot migrating $dst]
        # The source still serves the put it holds (it is "here").
        assert_equal 0 [R 0 cluster countkeysinslot $slot]
        assert_equal OK [R 1 cluster setslot $slot node $dst]
        assert_equal OK [R 0 cluster setslot $slot node $dst]
        assert_equal OK [R 2 cluster setslot $slot node $dst]
        wait_for_condition 50 100 {
            [cluster_slot_owner $slot 0] == 1 && [cluster_slot_owner $slot 2] == 1
        } else { fail "slot $slot did not move" }
        assert_match "MOVED $slot *:[cluster_port 1]" [cs_err {R 0 put.end $key}]
        assert_equal {} [R 1 get.replicas $key]
        # Nothing of it stayed pending on the source.
        assert_match "*store_pending_puts:0\r*" [R 0 info store]
        # The writer redoes the put on the new owner.
        cs_put 1 $key $data
        assert_equal $data [cs_read 1 $key]
    }

    test "a put pending on the source of a migrating slot is never published there: PUT.END gets ASK, redone on the target" {
        # Found by probing a reshard under load: a put started before the
        # slot was set MIGRATING was published on the source after the
        # key loop had found the slot empty, so SETSLOT NODE (sent to the
        # target first, as redis-cli does) gave the slot away with the key
        # left behind: acknowledged, and gone. With REPLACE over a key the
        # loop had moved, the target kept the old value.
        cluster_settle {0 1 2}
        set slot [lindex [lindex [cluster_slot_ranges 0] 0] 0]
        while {[R 0 cluster countkeysinslot $slot] > 0} { incr slot }
        set new [cluster_key_in_slot $slot askput]
        set old [cluster_key_in_slot $slot askrep]
        set gone [cluster_key_in_slot $slot askrev]
        set data [cs_bytes 43 3000]
        cs_put 0 $old [cs_bytes 44 3000]
        foreach {key opts} [list $new {} $old {replace} $gone {}] {
            lassign [lindex [R 0 put.start $key 3000 {*}$opts] 0] seg off len
            assert_equal OK [R 0 seg.write $seg $off $data]
        }
        set src [cluster_node_id 0]
        set dst [cluster_node_id 1]
        assert_equal OK [R 1 cluster setslot $slot importing $src]
        assert_equal OK [R 0 cluster setslot $slot migrating $dst]
        # The key loop: only the complete key is there to move.
        assert_equal [list $old] [R 0 cluster getkeysinslot $slot 10]
        assert_equal OK [R 0 migrate 127.0.0.1 [cluster_port 1] $old 0 5000]
        assert_equal {} [R 0 cluster getkeysinslot $slot 10]
        # Ending either put now would leave a key behind: both are sent on,
        # and the source drops them. A withdrawal still works here.
        assert_match "ASK $slot *:[cluster_port 1]" [cs_err {R 0 put.end $new}]
        assert_match "ASK $slot *:[cluster_port 1]" [cs_err {R 0 batch.put.end $old}]
        assert_equal OK [R 0 put.revoke $gone]
        assert_match "*store_pending_puts:0\r*" [R 0 info store]
        assert_equal 0 [R 0 cluster countkeysinslot $slot]
        # The writer redoes them on the target, behind ASKING.
        foreach {key opts} [list $new {} $old {replace}] {
            R 1 asking
            lassign [lindex [R 1 put.start $key 3000 {*}$opts] 0] seg off len
            assert_equal OK [R 1 seg.write $seg $off $data]
            R 1 asking
            assert_equal OK [R 1 put.end $key]
        }
        foreach i {1 0 2} { assert_equal OK [R $i cluster setslot $slot node $dst] }
        wait_for_condition 50 100 {
            [cluster_slot_owner $slot 0] == 1 && [cluster_slot_owner $slot 2] == 1
        } else { fail "slot $slot did not move" }
        assert_equal 0 [R 0 cluster countkeysinslot $slot]
        assert_equal 2 [R 1 cluster countkeysinslot $slot]
        assert_equal $data [cs_read 1 $new]
        assert_equal $data [cs_read 1 $old]
        R 1 del $new $old
    }

    test "a lease taken before a move keeps the old bytes readable on the source" {
        cluster_settle {0 1 2}
        set slot [lindex [lindex [cluster_slot_ranges 0] 0] 0]
        set key [cluster_key_in_slot $slot leased]
        set data [cs_bytes 7 70000]
        cs_put 0 $key $data
        set gr [R 0 get.replicas $key]
        assert {[lindex $gr 0] > 0}
        lassign [lindex $gr 3] seg off len
        cluster_cli --cluster reshard [cluster_addr 0] --cluster-from [cluster_node_id 0] \
            --cluster-to [cluster_node_id 1] --cluster-slots 1 --cluster-yes
        cluster_wait_ok
        assert_equal 1 [cluster_slot_owner $slot]
        assert_match "MOVED*" [cs_err {R 0 get.replicas $key}]
        # The lease holder's read of the old place still gives its bytes.
        assert_equal $data [R 0 seg.read $seg $off $len]
        assert_equal $data [cs_read 1 $key]
    }

    test "LEASE.RELEASE and MEMORY USAGE are routed like every keyed command" {
        cluster_settle {0 1 2}
        set range [lindex [cluster_slot_ranges 0] 0]
        set k1 [cluster_key_in_slot [lindex $range 0] rel]
        set k2 [cluster_key_in_slot [expr {[lindex $range 0] + 1}] rel]
        cs_put 0 $k1 [cs_bytes 9 1000]
        R 0 get.replicas $k1
        assert_match "MOVED*" [cs_err {R 1 lease.release $k1}]
        assert_match "CROSSSLOT*" [cs_err {R 0 lease.release $k1 $k2}]
        assert_equal 1 [R 0 lease.release $k1]
        assert_range [R 0 memory usage $k1] 1000 5096
        assert_match "MOVED*" [cs_err {R 1 memory usage $k1}]
        R 0 del $k1 ;# later tests move slots of node 0 without migrating keys
    }

    test "Pub/Sub: PUBLISH is node-local; shard channels are routed by slot and dropped when their slot moves" {
        cluster_settle {0 1 2}
        # A slot of node 0 holding no keys: it is moved below by SETSLOT
        # alone, which a node refuses while it holds keys there.
        set slot [lindex [lindex [cluster_slot_ranges 0] 0] 0]
        while {[R 0 cluster countkeysinslot $slot] > 0} { incr slot }
        set ch [cluster_key_in_slot $slot shard]
        # SUBSCRIBE and PUBLISH act on the node they are sent to.
        set sub1 [cluster_client 1 1]
        $sub1 subscribe news
        assert_equal {subscribe news 1} [read_with_timeout $sub1]
        assert_equal 0 [R 0 publish news x]
        assert_equal 1 [R 1 publish news y]
        assert_equal {message news y} [read_with_timeout $sub1]
        $sub1 close
        # Shard channels are keyed: MOVED elsewhere, delivered on the owner.
        assert_match "MOVED $slot *:[cluster_port 0]" [cs_err {R 1 spublish $ch m}]
        set sub0 [cluster_client 0 1]
        $sub0 ssubscribe $ch
        assert_equal [list ssubscribe $ch 1] [read_with_timeout $sub0]
        assert_equal 1 [R 0 spublish $ch m1]
        assert_equal [list smessage $ch m1] [read_with_timeout $sub0]
        assert_equal [list $ch 1] [R 0 pubsub shardnumsub $ch]
        # The slot moves to node 1: the subscriber is told, as Redis does.
        set src [cluster_node_id 0]
        set dst [cluster_node_id 1]
        assert_equal OK [R 1 cluster setslot $slot importing $src]
        assert_equal OK [R 0 cluster setslot $slot migrating $dst]
        foreach i {1 0 2} { assert_equal OK [R $i cluster setslot $slot node $dst] }
        wait_for_condition 50 100 {
            [cluster_slot_owner $slot 0] == 1 && [cluster_slot_owner $slot 2] == 1
        } else { fail "slot $slot did not move" }
        assert_equal [list sunsubscribe $ch 0] [read_with_timeout $sub0]
        assert_equal [list $ch 0] [R 0 pubsub shardnumsub $ch]
        $sub0 ssubscribe $ch
        assert_match "MOVED $slot *:[cluster_port 1]" [cs_err {read_with_timeout $sub0}]
        $sub0 close
    }

    test "topology changes wait for etcd: TRYAGAIN and nothing changed while it is down, done once it is back" {
        cluster_settle {0 1 2}
        set slot [lindex [lindex [cluster_slot_ranges 0] 0] 0]
        set dst [cluster_node_id 1]
        etcd_stop
        set t0 [clock milliseconds]
        set e [cs_err {R 0 cluster setslot $slot migrating $dst}]
        set took [expr {[clock milliseconds] - $t0}]
        assert_match "TRYAGAIN*etcd*nothing changed*" $e
        # Bounded by max(5 s, cluster-node-timeout) plus slack for a loaded machine.
        assert {$took < 15000}
        assert_no_match "*\[$slot->-*" [R 0 cluster nodes]
        # A client that leaves while its change waits: the change ends
        # without it, the node goes on (and pipelined commands of a waiting
        # client wait with it, in order).
        set gone [cluster_client 0 1]
        $gone cluster setslot $slot migrating $dst
        $gone close
        set waiter [cluster_client 0 1]
        $waiter cluster setslot $slot migrating $dst
        $waiter ping
        assert_match "TRYAGAIN*" [cs_err {$waiter read}]
        assert_equal PONG [$waiter read]
        $waiter close
        # Keys are still served meanwhile.
        set k [cluster_key_for_node 0 duringdown]
        assert_equal OK [R 0 set $k v]
        assert_equal v [R 0 get $k]
        etcd_restart
        wait_for_condition 100 100 {
            [cluster_info_field 0 cluster_etcd_reachable] == 1
        } else { fail "node 0 did not see etcd come back" }
        assert_equal OK [R 0 cluster setslot $slot migrating $dst]
        assert_match "*\[$slot->-$dst\]*" [R 0 cluster nodes]
        assert_equal OK [R 0 cluster setslot $slot stable]
        assert_no_match "*\[$slot->-*" [R 0 cluster nodes]
    }

    test "etcd recreated empty: the nodes write their records again, a node restarted then has its slots" {
        # etcd's revisions start again from 1. Before, every node kept its
        # mirror's newer mod revisions, ignored what etcd said and never
        # wrote its record again: a node restarted came back with no slots
        # while the others still sent it their clients, and every topology
        # change failed its compare until TRYAGAIN.
        cluster_settle {0 1 2}
        set map [cs_slot_map 0]
        etcd_wipe
        set prefix "/mooncake/$::cluster(name)/nodes/"
        set body [format {{"key":"%s","range_end":"%s","count_only":true}} [binary encode base64 $prefix] \
            [binary encode base64 "/mooncake/$::cluster(name)/nodes0"]]
        wait_for_condition 100 100 {
            [regexp {"count":"3"} [exec curl -s -X POST [etcd_endpoint]/v3/kv/range -d $body]]
        } else { fail "the nodes did not write their records into the new etcd: [exec curl -s -X POST [etcd_endpoint]/v3/kv/range -d $body]" }
        assert_match "*etcd's revision went back*" [exec cat [cluster_log 0]]
        cluster_stop_node 1
        cluster_restart_node 1
        cluster_wait_ok {0 1 2}
        foreach i {0 1 2} { assert_equal $map [cs_slot_map $i] "node $i" }
        set slot [lindex [lindex [cluster_slot_ranges 0] 0] 0]
        assert_equal OK [R 0 cluster setslot $slot migrating [cluster_node_id 1]]
        assert_equal OK [R 0 cluster setslot $slot stable]
    }

    test "a malformed record in etcd is ignored with a log line; the cluster keeps working" {
        cluster_settle {0 1 2}
        set prefix "/mooncake/$::cluster(name)/nodes/"
        set bad [string repeat a 40]
        set group [cs_group_of 0]
        foreach value [list "not json" {{"id":"aaaa"}} \
                [format {{"id":"%s","group":"%s","ip":"127.0.0.1","port":99999,"cport":1,"epoch":1}} $bad $group] \
                [format {{"id":"%s","group":"%s","ip":"127.0.0.1","port":7,"cport":1,"epoch":1,"slots":[[5,2]]}} $bad $group] \
                [format {{"id":"%s","group":"%s","ip":"1.2.3.4 myself,master","port":7,"cport":1,"epoch":1}} $bad $group] \
                [format {{"id":"%s","group":"%s","ip":"127.0.0.1","port":7,"cport":1,"epoch":1,"slots":[[0,16384]]}} $bad $group] \
                [format {{"id":"%s","group":"%s","ip":"127.0.0.1","port":7,"cport":1,"epoch":99,"slots":[[0,9]]}} [string repeat c 40] $group]] {
            cs_etcd_put $prefix$bad $value
        }
        wait_for_condition 50 100 {
            [regexp -all {ignoring etcd record} [exec cat [cluster_log 0]]] >= 5
        } else { fail "no log line for each bad record" }
        assert_no_match "*$bad*" [R 0 cluster nodes]
        assert_equal ok [cluster_info_field 0 cluster_state]
        assert_equal 3 [cluster_info_field 0 cluster_known_nodes]
        set k [cluster_key_for_node 2 afterbad]
        assert_equal OK [R 2 set $k v]
    }

    test "redis-cli --cluster info counts keys per node, --cluster fix closes a slot left open" {
        cluster_settle {0 1 2}
        set out [cluster_cli --cluster info [cluster_addr 0]]
        foreach i {0 1 2} {
            assert_match "*[cluster_addr $i] ([string range [cluster_node_id $i] 0 7]...) -> [R $i dbsize] keys*" $out
        }
        # A reshard that died after MIGRATING: the slot stays open until fix.
        set slot [lindex [lindex [cluster_slot_ranges 0] 0] 0]
        assert_equal OK [R 0 cluster setslot $slot migrating [cluster_node_id 1]]
        set rc [cluster_cli_rc --cluster check [cluster_addr 0]]
        assert {[lindex $rc 0] != 0}
        assert_match "*open slot*" [string tolower [lindex $rc 1]]
        cluster_cli --cluster fix [cluster_addr 0]
        cluster_wait_ok {0 1 2}
        assert_no_match "*\[$slot->-*" [R 0 cluster nodes]
    }

    test "CLUSTER errors are Redis's" {
        cluster_settle {0 1 2}
        set me [cluster_node_id 0]
        assert_equal "ERR I tried hard but I can't forget myself..." [cs_err {R 0 cluster forget $me}]
        assert_match "ERR Unknown node*" [cs_err {R 0 cluster forget [string repeat b 40]}]
        assert_equal "ERR The user can assign a config epoch only when the node does not know any other node." \
            [cs_err {R 0 cluster set-config-epoch 9}]
        set theirs [lindex [lindex [cluster_slot_ranges 1] 0] 0]
        assert_equal "ERR I'm not the owner of hash slot $theirs" \
            [cs_err {R 0 cluster setslot $theirs migrating [cluster_node_id 1]}]
        set mine [lindex [lindex [cluster_slot_ranges 0] 0] 0]
        assert_equal "ERR I'm already the owner of hash slot $mine" \
            [cs_err {R 0 cluster setslot $mine importing [cluster_node_id 1]}]
        assert_equal "ERR Slot $mine is already busy" [cs_err {R 1 cluster addslots $mine}]
        assert_equal "ERR Slot 3 specified multiple times" [cs_err {R 1 cluster delslots 3 3}]
        assert_equal "ERR Invalid or out of range slot" [cs_err {R 1 cluster addslots 16384}]
        assert_equal "ERR Invalid or out of range slot" [cs_err {R 1 cluster delslots -1}]
        assert_match "ERR No node at 127.0.0.1:1 *" [cs_err {R 0 cluster meet 127.0.0.1 1}]
        assert_match "ERR CLUSTER RESET can't be called with master nodes containing keys" \
            [cs_err {R 0 cluster reset soft}]
        assert_match "ERR Invalid CLUSTER SETSLOT action*" [cs_err {R 0 cluster setslot 1 sideways}]
        # Nothing above changed the map.
        cluster_wait_ok {0 1 2}
    }

    test "a node whose id file is unreadable refuses to start, saying why" {
        cluster_settle {0 1 2}
        cluster_stop_node 2
        set f [file join [cluster_dir 2] nodes-[cluster_port 2].conf]
        assert {[file exists $f]}
        set fd [open $f r]; set good [read $fd]; close $fd
        set fd [open $f w]; puts $fd "id not-a-node-id"; close $fd
        set rc [catch {cluster_restart_node 2} err]
        assert {$rc != 0}
        wait_for_condition 50 100 {
            [string match "*has no valid 'id <40 hex chars>' line*" [exec cat [cluster_log 2]]]
        } else { fail "no clear message in the log" }
        set fd [open $f w]; puts -nonewline $fd $good; close $fd
        cluster_restart_node 2
        cluster_wait_ok {0 1 2}
    }
}

# Membership without redis-cli: MEET merges groups, FORGET splits them (and
# is fine when another node's FORGET already did), RESET HARD takes a new
# identity that a restart keeps.
cluster_block mooncake {nodes 2 timeout 2000} {
    test "MEET, FORGET, SET-CONFIG-EPOCH, BUMPEPOCH and RESET HARD go through etcd" {
        assert_equal 1 [cluster_info_field 0 cluster_known_nodes]
        assert_equal 1 [cluster_info_field 1 cluster_known_nodes]
        assert_equal OK [R 0 cluster set-config-epoch 5]
        assert_equal "ERR Node config epoch is already non-zero" [cs_err {R 0 cluster set-config-epoch 6}]
        assert_equal OK [R 0 cluster meet 127.0.0.1 [cluster_port 1]]
        wait_for_condition 50 100 {
            [cluster_info_field 0 cluster_known_nodes] == 2 && [cluster_info_field 1 cluster_known_nodes] == 2
        } else { fail "MEET did not join the two nodes" }
        # Node 1 (epoch 0) is not unique: bumped past node 0's 5.
        assert_equal "BUMPED 6" [R 1 cluster bumpepoch]
        assert_equal "STILL 6" [R 1 cluster bumpepoch]
        set id1 [cluster_node_id 1]
        assert_equal OK [R 0 cluster forget $id1]
        assert_equal OK [R 1 cluster forget [cluster_node_id 0]]
        wait_for_condition 50 100 {
            [cluster_info_field 0 cluster_known_nodes] == 1 && [cluster_info_field 1 cluster_known_nodes] == 1
        } else { fail "FORGET did not split the two nodes" }
        assert_equal OK [R 1 cluster addslotsrange 0 100]
        assert_equal 101 [cluster_info_field 1 cluster_slots_assigned]
        assert_equal OK [R 1 cluster reset hard]
        set new [cluster_node_id 1]
        assert {$new ne $id1}
        assert_equal 0 [cluster_info_field 1 cluster_slots_assigned]
        assert_equal 0 [cluster_info_field 1 cluster_my_epoch]
        cluster_stop_node 1
        cluster_restart_node 1
        assert_equal $new [cluster_node_id 1]
        assert_equal 0 [cluster_info_field 1 cluster_slots_assigned]
    }
}
