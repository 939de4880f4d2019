// The memory tree's symlinks, modes, times, inode ids and change reports,
// driven directly through struct ws_vfs_ops.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

extern "C" {
#include "server/base/errors.h"
#include "server/providers/memory.h"
#include "server/vfs/vfs.h"
}

namespace
{

struct Change {
    ws_vfs_change what;
    ws_ftype type;
    std::string path, from;
};

class MemTree : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        ASSERT_EQ(ws_memfs_new(&fs_), 0);
        ops_ = fs_->ops;
    }
    void TearDown() override
    {
        if (sub_)
            ops_->unsubscribe(sub_);
        ops_->destroy(fs_);
    }

    int Put(const std::string &path, const std::string &data, ws_write_opts o = {})
    {
        ws_vfs_writer *w = nullptr;
        int r = ops_->write_begin(fs_, path.c_str(), &o, &w);
        if (r < 0)
            return r;
        r = ops_->write(w, data.data(), data.size());
        if (r < 0) {
            ops_->write_abort(w);
            return r;
        }
        return ops_->write_commit(w, nullptr);
    }

    std::string Link(const std::string &path)
    {
        char buf[WS_VFS_PATH_MAX];
        ssize_t n = ops_->readlink(fs_, path.c_str(), buf, sizeof(buf));
        if (n < 0)
            return "ERR" + std::to_string(-n);
        return std::string(buf, (size_t)n);
    }

    static void OnChange(void *ud, ws_vfs_change what, ws_ftype type, const char *path,
                         const char *from)
    {
        auto *v = static_cast<std::vector<Change> *>(ud);
        v->push_back({what, type, path, from ? from : ""});
    }

    void Subscribe()
    {
        ASSERT_EQ(ops_->subscribe(fs_, OnChange, &changes_, &sub_), 0);
    }

    ws_vfs *fs_ = nullptr;
    const ws_vfs_ops *ops_ = nullptr;
    ws_vfs_sub *sub_ = nullptr;
    std::vector<Change> changes_;
};

TEST_F(MemTree, SymlinkIsAnEntryNeverFollowed)
{
    ASSERT_EQ(ops_->mkdir(fs_, "d", false, 0), 0);
    ASSERT_EQ(Put("d/f", "data"), 0);
    ASSERT_EQ(ops_->symlink(fs_, "d", "l"), 0);
    ASSERT_EQ(ops_->symlink(fs_, "/", "root"), 0);
    EXPECT_EQ(Link("l"), "d");
    EXPECT_EQ(Link("root"), "/");
    EXPECT_EQ(Link("d/f"), "ERR" + std::to_string(EINVAL));
    EXPECT_EQ(Link("nope"), "ERR" + std::to_string(ENOENT));
    char small[1];
    EXPECT_EQ(ops_->readlink(fs_, "l", small, 0), -ENAMETOOLONG);

    ws_stat st;
    ASSERT_EQ(ops_->stat(fs_, "l", &st), 0);
    EXPECT_EQ(st.type, WS_FT_SYMLINK);
    EXPECT_EQ(st.size, 1u);
    EXPECT_EQ(st.nlink, 1u);
    // A path through a symlink is not a path through a directory.
    EXPECT_EQ(ops_->stat(fs_, "l/f", &st), -ENOTDIR);
    ws_vfs_dir *dir = nullptr;
    EXPECT_EQ(ops_->opendir(fs_, "l", &dir), -WS_ESYMLINK_LEAF);
    ws_vfs_file *file = nullptr;
    EXPECT_EQ(ops_->open_read(fs_, "l", &file, &st), -WS_ESYMLINK_LEAF);
    ws_write_opts o = {};
    ws_vfs_writer *w = nullptr;
    EXPECT_EQ(ops_->write_begin(fs_, "l", &o, &w), -WS_ESYMLINK_LEAF);
    EXPECT_EQ(Put("l/g", "x"), -ENOTDIR);
    o.create_parents = true;
    EXPECT_EQ(Put("l/g", "x", o), -ENOTDIR);
    EXPECT_EQ(ops_->mkdir(fs_, "l", true, 0), -EEXIST);
    EXPECT_EQ(ops_->mkdir(fs_, "l/x", true, 0), -ENOTDIR);
    EXPECT_EQ(ops_->symlink(fs_, "x", "l"), -EEXIST);
    EXPECT_EQ(ops_->symlink(fs_, "x", "nope/l"), -ENOENT);
    EXPECT_EQ(ops_->symlink(fs_, "", "e"), -ENOENT);

    // The root's listing shows it as a symlink; opendir_at refuses it.
    ASSERT_EQ(ops_->opendir(fs_, ".", &dir), 0);
    ws_dirent e;
    int links = 0;
    while (ops_->readdir(dir, &e) > 0) {
        std::string name(e.name, e.name_len);
        if (name == "l" || name == "root") {
            EXPECT_EQ(e.type, WS_FT_SYMLINK);
            links++;
        }
    }
    EXPECT_EQ(links, 2);
    ws_vfs_dir *sub = nullptr;
    EXPECT_EQ(ops_->opendir_at(dir, "l", &sub), -ENOTDIR);
    EXPECT_EQ(ops_->open_read_at(dir, "l", &file, &st), -WS_ESYMLINK_LEAF);
    ASSERT_EQ(ops_->stat_at(dir, "l", &st), 0);
    EXPECT_EQ(st.type, WS_FT_SYMLINK);
    ops_->closedir(dir);

    // Moved and removed as a link; the target is untouched.
    ASSERT_EQ(ops_->move(fs_, "l", "l2", false), 0);
    EXPECT_EQ(Link("l2"), "d");
    ASSERT_EQ(ops_->remove(fs_, "l2", false, nullptr), 0);
    ASSERT_EQ(ops_->stat(fs_, "d/f", &st), 0);
    // The target's bytes are held, and given back.
    EXPECT_EQ(ws_memfs_bytes(fs_), 4u + 1u);
    ASSERT_EQ(ops_->remove(fs_, "root", false, nullptr), 0);
    EXPECT_EQ(ws_memfs_bytes(fs_), 4u);
}

TEST_F(MemTree, SymlinkCountsAgainstLimits)
{
    ws_memfs_set_limits(fs_, 3, 0);
    EXPECT_EQ(ops_->symlink(fs_, "long", "l"), -WS_EQUOTA);
    EXPECT_EQ(ops_->symlink(fs_, "abc", "l"), 0);
    EXPECT_EQ(ws_memfs_bytes(fs_), 3u);
    ws_memfs_set_limits(fs_, 0, 2);
    EXPECT_EQ(ops_->symlink(fs_, "x", "m"), -WS_EQUOTA);
    EXPECT_EQ(ws_memfs_bytes(fs_), 3u);
}

TEST_F(MemTree, ModeAndMtime)
{
    ASSERT_EQ(Put("f", "x"), 0);
    ASSERT_EQ(ops_->mkdir(fs_, "d", false, 0), 0);
    ASSERT_EQ(ops_->symlink(fs_, "f", "l"), 0);
    ASSERT_EQ(ops_->set_mode(fs_, "f", 0100755), 0);
    ASSERT_EQ(ops_->set_mode(fs_, "d", 01777), 0);
    EXPECT_EQ(ops_->set_mode(fs_, "l", 0600), -WS_ESYMLINK_LEAF);
    EXPECT_EQ(ops_->set_mode(fs_, "nope", 0600), -ENOENT);
    ws_stat st;
    ASSERT_EQ(ops_->stat(fs_, "f", &st), 0);
    EXPECT_EQ(st.mode, 0755u);
    ASSERT_EQ(ops_->stat(fs_, "d", &st), 0);
    EXPECT_EQ(st.mode, 01777u);

    const int64_t t = 1234567890123456789;
    ASSERT_EQ(ops_->set_mtime(fs_, "f", t), 0);
    ASSERT_EQ(ops_->set_mtime(fs_, "d", t + 1), 0);
    ASSERT_EQ(ops_->set_mtime(fs_, "l", t + 2), 0);
    EXPECT_EQ(ops_->set_mtime(fs_, "nope", t), -ENOENT);
    ASSERT_EQ(ops_->stat(fs_, "f", &st), 0);
    EXPECT_EQ(st.mtime_ns, t);
    ASSERT_EQ(ops_->stat(fs_, "d", &st), 0);
    EXPECT_EQ(st.mtime_ns, t + 1);
    ASSERT_EQ(ops_->stat(fs_, "l", &st), 0);
    EXPECT_EQ(st.mtime_ns, t + 2);
    EXPECT_EQ(st.mode, 0777u);
}

TEST_F(MemTree, InoIsANodeIdThatFollowsTheNode)
{
    ASSERT_EQ(Put("a", "x"), 0);
    ASSERT_EQ(Put("b", "x"), 0);
    ws_stat a, b, root, moved;
    ASSERT_EQ(ops_->stat(fs_, "a", &a), 0);
    ASSERT_EQ(ops_->stat(fs_, "b", &b), 0);
    ASSERT_EQ(ops_->stat(fs_, ".", &root), 0);
    EXPECT_NE(a.ino, 0u);
    EXPECT_NE(a.ino, b.ino);
    EXPECT_NE(a.ino, root.ino);
    ASSERT_EQ(ops_->move(fs_, "a", "c", false), 0);
    ASSERT_EQ(ops_->stat(fs_, "c", &moved), 0);
    EXPECT_EQ(moved.ino, a.ino);
    // A replace keeps the node.
    ASSERT_EQ(Put("c", "yy"), 0);
    ASSERT_EQ(ops_->stat(fs_, "c", &moved), 0);
    EXPECT_EQ(moved.ino, a.ino);
    ASSERT_EQ(ops_->remove(fs_, "c", false, nullptr), 0);
    ASSERT_EQ(Put("c", "z"), 0);
    ASSERT_EQ(ops_->stat(fs_, "c", &moved), 0);
    EXPECT_NE(moved.ino, a.ino);
}

TEST_F(MemTree, EveryChangeIsReported)
{
    Subscribe();
    ws_write_opts o = {};
    o.create_parents = true;
    ASSERT_EQ(Put("a/b/f", "1", o), 0);
    ASSERT_EQ(Put("a/b/f", "2"), 0);
    ASSERT_EQ(ops_->mkdir(fs_, "x/y", true, 0), 0);
    ASSERT_EQ(ops_->mkdir(fs_, "x/y", true, 0), 0); // exists: nothing
    ASSERT_EQ(ops_->symlink(fs_, "/", "x/l"), 0);
    ASSERT_EQ(ops_->set_mode(fs_, "a/b/f", 0600), 0);
    ASSERT_EQ(ops_->set_mtime(fs_, "x/l", 1), 0);
    ASSERT_EQ(ops_->move(fs_, "a/b", "x/y/b", false), 0);
    ASSERT_EQ(ops_->remove(fs_, "x", true, nullptr), 0);
    // Failures report nothing.
    EXPECT_EQ(ops_->remove(fs_, "x", true, nullptr), -ENOENT);
    EXPECT_EQ(ops_->mkdir(fs_, "a", false, 0), -EEXIST);

    std::vector<Change> want = {
        {WS_VFS_CREATED, WS_FT_DIRECTORY, "a", ""},
        {WS_VFS_CREATED, WS_FT_DIRECTORY, "a/b", ""},
        {WS_VFS_CREATED, WS_FT_REGULAR, "a/b/f", ""},
        {WS_VFS_MODIFIED, WS_FT_REGULAR, "a/b/f", ""},
        {WS_VFS_CREATED, WS_FT_DIRECTORY, "x", ""},
        {WS_VFS_CREATED, WS_FT_DIRECTORY, "x/y", ""},
        {WS_VFS_CREATED, WS_FT_SYMLINK, "x/l", ""},
        {WS_VFS_MODIFIED, WS_FT_REGULAR, "a/b/f", ""},
        {WS_VFS_MODIFIED, WS_FT_SYMLINK, "x/l", ""},
        {WS_VFS_MOVED, WS_FT_DIRECTORY, "x/y/b", "a/b"},
        // Deepest first, each entry once.
        {WS_VFS_REMOVED, WS_FT_REGULAR, "x/y/b/f", ""},
        {WS_VFS_REMOVED, WS_FT_DIRECTORY, "x/y/b", ""},
        {WS_VFS_REMOVED, WS_FT_DIRECTORY, "x/y", ""},
        {WS_VFS_REMOVED, WS_FT_SYMLINK, "x/l", ""},
        {WS_VFS_REMOVED, WS_FT_DIRECTORY, "x", ""},
    };
    ASSERT_EQ(changes_.size(), want.size());
    for (size_t i = 0; i < want.size(); i++) {
        SCOPED_TRACE(i);
        EXPECT_EQ(changes_[i].what, want[i].what);
        EXPECT_EQ(changes_[i].type, want[i].type);
        EXPECT_EQ(changes_[i].path, want[i].path);
        EXPECT_EQ(changes_[i].from, want[i].from);
    }
}

TEST_F(MemTree, UnsubscribeStopsReports)
{
    Subscribe();
    ASSERT_EQ(Put("f", "x"), 0);
    ops_->unsubscribe(sub_);
    sub_ = nullptr;
    ASSERT_EQ(Put("g", "x"), 0);
    ASSERT_EQ(changes_.size(), 1u);
    EXPECT_EQ(changes_[0].path, "f");
}

TEST_F(MemTree, DeepPathsAreReportedWhole)
{
    std::string path;
    for (int i = 0; i < 1500; i++)
        path += i ? "/d" : "d";
    ASSERT_EQ(ops_->mkdir(fs_, path.c_str(), true, 0), 0);
    // Moved below itself deeper than a path may be spelled.
    ASSERT_EQ(ops_->mkdir(fs_, "e", false, 0), 0);
    Subscribe();
    ASSERT_EQ(ops_->move(fs_, "e", path.c_str(), false), -EEXIST);
    ASSERT_EQ(ops_->move(fs_, "e", (path + "/e").c_str(), false), 0);
    ASSERT_EQ(changes_.size(), 1u);
    EXPECT_EQ(changes_[0].path, path + "/e");
    EXPECT_EQ(changes_[0].from, "e");
    changes_.clear();
    ASSERT_EQ(ops_->remove(fs_, "d", true, nullptr), 0);
    ASSERT_EQ(changes_.size(), 1501u);
    EXPECT_EQ(changes_.front().path, path + "/e");
    EXPECT_EQ(changes_.back().path, "d");
}

} // namespace
